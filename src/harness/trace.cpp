// The trace page and its JSON (harness/trace.h).
#include "harness/trace.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "harness/results.h"
#include "strategies/trace.h"

namespace specdec::harness {

extern const char* const k_trace_page;  // trace_page.cpp
namespace {
constexpr const char* k_data_marker = "@TRACE_JSON@";

std::string dump(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace

PhaseBreakdown phase_breakdown(const strategies::Stats& s) {
  PhaseBreakdown p;
  p.ms = s.phase_ms;
  p.wall_ms = s.ms_total;
  p.n_rounds = s.n_rounds > 0 ? s.n_rounds : std::max<int64_t>(0, s.n_target_forwards - 1);
  p.n_generations = 1;
  return p;
}

nlohmann::json generation_json(const strategies::Result& r, const std::string& strategy) {
  const auto& s = r.stats;
  const double ms_decode = s.ms_total - s.phase_ms.prefill;
  nlohmann::json j = {
      {"strategy", strategy}, {"finish", strategies::to_string(r.finish)}, {"n_prompt", s.n_prompt},
      {"n_generated", s.n_generated}, {"n_target_forwards", s.n_target_forwards},
      {"n_draft_forwards", s.n_draft_forwards}, {"n_drafted", s.n_drafted}, {"n_accepted", s.n_accepted},
      {"n_rounds", s.n_rounds}, {"n_tree_rounds", s.n_tree_rounds}, {"verify_modes", s.verify_mode_rounds},
      {"alpha", s.alpha()}, {"tau", s.tau()},
      {"accepted_per_position", s.accepted_per_position}, {"drafted_per_position", s.drafted_per_position},
      {"gamma_rounds", s.gamma_rounds}, {"n_aside_tokens", s.n_aside_tokens},
      // ms_<phase> for the phases older readers know; "phases" has them all.
      {"ms_prefill", s.phase_ms.prefill}, {"ms_draft", s.phase_ms.draft}, {"ms_verify", s.phase_ms.verify},
      {"ms_sample", s.phase_ms.sample}, {"ms_rollback", s.phase_ms.rollback}, {"ms_total", s.ms_total},
      {"ms_first_token", s.ms_first_token}, {"phases", to_json(phase_breakdown(s))},
      {"ms_per_token", s.n_generated ? ms_decode / double(s.n_generated) : 0.0},
      {"tokens_per_s", ms_decode > 0 ? 1000.0 * double(s.n_generated) / ms_decode : 0.0}};
  if (!s.drafter_stats.empty()) j["drafter_stats"] = s.drafter_stats;
  if (!s.per_drafter.empty()) j["per_drafter"] = per_drafter_json(s.per_drafter);
  if (!s.synthetic_acceptance.empty()) j["synthetic_acceptance"] = s.synthetic_acceptance;  // not the target's tokens
  if (s.n_forced > 0) j["n_forced"] = s.n_forced;  // structured output: drafted without the drafter
  if (s.n_refused > 0) j["n_refused"] = s.n_refused;  // structured output: draft tokens the grammar refused
  if (s.n_jump_drafted > 0) j["n_jump_drafted"] = s.n_jump_drafted, j["n_jump"] = s.n_jump;  // its jump-forward tokens
  return {{"tokens", r.tokens}, {"text", r.text}, {"stats", j}};
}

nlohmann::json trace_document(const nlohmann::json& what, const strategies::Result& r, const std::string& strategy,
                              const strategies::TraceRecorder& recorder) {
  nlohmann::json j = {{"version", 1}};
  j.update(what);
  j["finish"] = strategies::to_string(r.finish);
  const nlohmann::json result = generation_json(r, strategy);
  for (const char* key : {"tokens", "text", "stats"}) j[key] = result[key];
  j.update(recorder.to_json());
  return j;
}

std::string trace_json_path(const std::string& html_path) {
  namespace fs = std::filesystem;
  SD_CHECK(!html_path.empty(), "trace: the output path is empty");
  fs::path p(html_path);
  SD_CHECK(!fs::is_directory(p), "trace: output '", html_path, "' is a directory; give a file such as trace.html");
  SD_CHECK(!p.has_parent_path() || fs::is_directory(p.parent_path()), "trace: the folder of output '", html_path,
           "' does not exist");
  SD_CHECK(p.extension() != ".json", "trace: output '", html_path,
           "' ends in .json, where the trace data goes; give the page's name (e.g. trace.html)");
  return p.replace_extension(".json").string();
}

std::string trace_html(const nlohmann::json& trace) {
  // '<' only occurs inside JSON strings, where \u003c is the same character: nothing in the
  // data can close the <script> block or open a comment in it.
  std::string data;
  for (char c : dump(trace, -1)) {
    if (c == '<') data += "\\u003c";
    else data += c;
  }
  std::string page = k_trace_page;
  const size_t at = page.find(k_data_marker);
  SD_CHECK(at != std::string::npos, "trace: the page template lacks its data marker");
  return page.replace(at, std::string(k_data_marker).size(), data);
}

std::string write_trace(const std::string& html_path, const nlohmann::json& trace) {
  const std::string json_path = trace_json_path(html_path);
  write_atomic(html_path, trace_html(trace));
  write_atomic(json_path, dump(trace, 1) + "\n");
  return json_path;
}

}  // namespace specdec::harness
