// The trace page and its JSON (harness/trace.h).
#include "harness/trace.h"

#include <filesystem>

#include "core/error.h"
#include "harness/results.h"

namespace specdec::harness {

extern const char* const k_trace_page;  // trace_page.cpp
namespace {
constexpr const char* k_data_marker = "@TRACE_JSON@";

std::string dump(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace

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
