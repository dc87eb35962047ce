#pragma once
// The trace view of one generation (`specdec trace`, `specdec generate --trace`): one
// self-contained HTML file (inline CSS and JS, the trace as embedded JSON, no network) and
// the same JSON beside it for scripts. The JSON's schema: configs/README.md, "trace.json".
#include <nlohmann/json.hpp>
#include <string>

namespace specdec::harness {

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
