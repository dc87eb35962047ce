#pragma once
// Files written so that a crash leaves either the old or the new content (results, cost tables).
#include <string>

namespace specdec::io {

// Appends `text` (one or more complete lines) to `path` with O_APPEND and fsyncs it.
void append_durable(const std::string& path, const std::string& text);
// Writes `text` to `path` atomically (temporary file + fsync + rename).
void write_atomic(const std::string& path, const std::string& text);

}  // namespace specdec::io
