// libFuzzer target for the prompts JSONL loader, harness::load_prompts_jsonl
// (src/harness/experiment.cpp): one object per line, {"text": ...} or Spec-Bench's multi-turn
// {"question_id": ..., "category": ..., "turns": [...]}. The input is the file's content.
// Properties: loading either succeeds or throws specdec::Error, nothing else; when it
// succeeds, every non-blank line gave exactly one prompt (blank = only spaces, tabs, CRs),
// each with a non-empty text and non-empty follow-up turns, follow-ups only on chat prompts,
// and, read back here with nlohmann::json, the line's text (or first turn), its other turns
// and its chat flag (or else the caller's default). Each file is loaded with both defaults.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_common.h"
#include "harness/experiment.h"

namespace {

const specdec::fuzz::ScratchDir& scratch() {
  static const specdec::fuzz::ScratchDir dir;
  return dir;
}

// The lines with something besides spaces, tabs and CRs, cut here independently.
std::vector<std::string> non_blank_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
    start = end + 1;
  }
  return out;
}

void check(const std::string& path, const std::string& text, bool chat_default) {
  using specdec::fuzz::property_failed;
  std::vector<specdec::harness::PromptItem> prompts;
  try {
    prompts = specdec::harness::load_prompts_jsonl(path, chat_default);
  } catch (const specdec::Error&) {
    return;  // rejected with a message: fine
  }
  const auto lines = non_blank_lines(text);
  if (prompts.size() != lines.size())
    property_failed(std::to_string(prompts.size()) + " prompts from " + std::to_string(lines.size()) +
                    " non-blank lines");
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const std::string where = "prompt " + std::to_string(i) + ": ";
    if (p.text.empty()) property_failed(where + "empty text accepted");
    for (const auto& f : p.follow_ups)
      if (f.empty()) property_failed(where + "empty follow-up turn accepted");
    if (!p.follow_ups.empty() && !p.chat) property_failed(where + "follow-up turns without chat");
    // The loader accepted the line, so it is valid JSON no deeper than its nesting limit.
    const auto j = nlohmann::json::parse(lines[i]);
    std::vector<std::string> turns;
    if (j.contains("text")) turns.push_back(j["text"].get<std::string>());
    else turns = j["turns"].get<std::vector<std::string>>();
    std::vector<std::string> got = {p.text};
    got.insert(got.end(), p.follow_ups.begin(), p.follow_ups.end());
    if (got != turns) property_failed(where + "text/turns differ from the line's");
    const bool chat = j.contains("chat") ? j["chat"].get<bool>() : chat_default;
    if (p.chat != chat) property_failed(where + "chat flag differs from the line's (or the default)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = scratch().file("prompts.jsonl");
  specdec::fuzz::write_file(path, text);
  check(path, text, false);
  check(path, text, true);
  return 0;
}
