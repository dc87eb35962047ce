#pragma once
// The tiny target of the structured-output tests that run the real speculative loop
// (test_strategies_grammar_forced_tiny.cpp, test_strategies_grammar_drafts_tiny.cpp): a tiny
// chat Llama (tests/support/tiny_gguf.h; its end id, <|im_end|>, closes the grammar) that is its
// own draft model, so that at T = 0 every token its drafter proposes is the target's; a JSON
// schema; and a request. Loaded once per test program. Tests only.
#include <filesystem>
#include <map>
#include <string>

#include "model/causal_lm.h"
#include "strategies/strategy.h"
#include "tests/support/command.h"
#include "tests/support/tiny_gguf.h"
#include "tokenizer/tokenizer.h"

namespace specdec::testing_support::grammar_tiny {

inline constexpr const char* kSchema =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},)"
    R"( "count": {"type": "integer"}, "valid": {"type": "boolean"}}, "required": ["name", "count", "valid"]})";

inline const model::LoadedModel& target() {
  static const ProcessDir dir("specdec_grammar_tiny");
  static const model::LoadedModel loaded = [] {
    specdec::testing::TinyGgufOptions o;
    o.chat = true;
    model::ModelSpec spec;
    spec.name = "target.gguf";
    spec.path = specdec::testing::write_tiny_gguf((dir.path / "target.gguf").string(), o);
    spec.threads = 1;
    return model::load(spec);
  }();
  return loaded;
}

// `prompt` as a chat turn, 48 new tokens at most, the target drafting for itself.
inline strategies::Request request(const std::string& prompt) {
  strategies::Request r;
  r.target = target().model;
  r.tokenizer = target().tokenizer;
  r.draft = r.target;
  r.prompt = r.tokenizer->encode(prompt, true);
  r.stop.eos_ids = r.tokenizer->eos_ids();
  r.stop.max_new_tokens = 48;
  return r;
}

// The strategy parameters `extra` with the schema, at temperature 0 unless `extra` sets one.
inline strategies::Params params(std::map<std::string, std::string> extra = {}) {
  if (!extra.count("temperature")) extra["temperature"] = "0";
  extra["json_schema"] = kSchema;
  return strategies::Params(extra);
}

}  // namespace specdec::testing_support::grammar_tiny
