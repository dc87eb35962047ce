#pragma once
// The trace view of one generation (`specdec trace`, `specdec generate --trace`): one
// self-contained HTML file (inline CSS and JS, the trace as embedded JSON, no network) and
// the same JSON beside it for scripts. The JSON's schema: configs/README.md, "trace.json".
#include <nlohmann/json.hpp>
#include <string>

#include "harness/metrics.h"
#include "strategies/strategy.h"

namespace specdec::strategies { class TraceRecorder; }

namespace specdec::harness {

// One generation's phases in the harness's format (a round is a verification round, or one
// decode step for autoregressive strategies).
PhaseBreakdown phase_breakdown(const strategies::Stats& s);

// {"tokens", "text", "stats"}: a generation as `specdec generate --json` prints it.
nlohmann::json generation_json(const strategies::Result& r, const std::string& strategy);

// trace.json: `what` was run (model, draft, strategy, params, seed, prompt, ...), then the
// result, its stats (generation_json) and the recorder's rounds.
nlohmann::json trace_document(const nlohmann::json& what, const strategies::Result& r, const std::string& strategy,
                              const strategies::TraceRecorder& recorder);

// Where the JSON goes for a page path: the same name with .json for .html ("t.html" ->
// "t.json"; "t" -> "t.json"). Throws specdec::Error for a path ending in .json (the page
// would be overwritten by its data), naming a directory, or in a folder that does not exist.
std::string trace_json_path(const std::string& html_path);

// The page for a trace: the template (trace_page.cpp) with the JSON embedded in a
// <script type="application/json"> block, every '<' escaped as \u003c so no text in it can
// end the block. Invalid UTF-8 (a token piece cut inside a character) becomes U+FFFD.
std::string trace_html(const nlohmann::json& trace);

// Writes the page to html_path and the JSON to trace_json_path(html_path); returns the
// JSON's path. Throws specdec::Error naming the file when either cannot be written.
std::string write_trace(const std::string& html_path, const nlohmann::json& trace);

}  // namespace specdec::harness
