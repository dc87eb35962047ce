#pragma once
// Reading untrusted JSON. Every JSON reader in src/ goes through here (the safetensors header
// has its own, tighter, limit): nlohmann::json parses iteratively, but copying, comparing and
// dump() recurse, so a file nesting 300,000 levels deep would overflow the stack later.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace specdec::io {

// Deepest nesting of arrays and objects accepted in a JSON document. Real files (config.json,
// tokenizer.json, prompts JSONL, results) nest fewer than 10 levels.
constexpr int k_max_json_depth = 256;

// Throws specdec::Error "<what>: JSON nested deeper than 256 levels (at byte N)". A linear
// scan of the brackets outside strings, so it is safe on any input and costs one pass.
void check_json_depth(std::string_view text, const std::string& what);

// check_json_depth, then parse; a syntax error becomes specdec::Error "<what>: invalid JSON: ...".
nlohmann::json parse_json_text(std::string_view text, const std::string& what);

// Reads and parses a whole file. Errors name `path`: missing, a directory, unreadable,
// nested too deep, or invalid JSON.
nlohmann::json read_json_file(const std::string& path);

}  // namespace specdec::io
