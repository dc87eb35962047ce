#include "io/json_limits.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace specdec::io {

void check_json_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // skip the escaped character (\" does not end the string)
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > k_max_json_depth)
        fail(what, ": JSON nested deeper than ", k_max_json_depth, " levels (at byte ", i, ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json_text(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(what, ": invalid JSON: ", e.what());
  }
}

nlohmann::json read_json_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, ": cannot open: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, ": is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

}  // namespace specdec::io
