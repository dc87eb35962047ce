#pragma once
// Minimal leveled logging to stderr. SPECDEC_LOG=debug|info|warn|error sets the level.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

namespace specdec::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

inline Level level() {
  static const Level lvl = [] {
    const char* e = std::getenv("SPECDEC_LOG");
    if (!e) return Level::info;
    if (!std::strcmp(e, "debug")) return Level::debug;
    if (!std::strcmp(e, "warn")) return Level::warn;
    if (!std::strcmp(e, "error")) return Level::error;
    return Level::info;
  }();
  return lvl;
}

template <class... A>
void write(Level l, const char* tag, A&&... parts) {
  if (l < level()) return;
  std::ostringstream os;
  os << "[specdec " << tag << "] ";
  (os << ... << parts);
  os << '\n';
  std::cerr << os.str();
}

template <class... A> void debug(A&&... a) { write(Level::debug, "debug", std::forward<A>(a)...); }
template <class... A> void info(A&&... a) { write(Level::info, "info", std::forward<A>(a)...); }
template <class... A> void warn(A&&... a) { write(Level::warn, "warn", std::forward<A>(a)...); }
template <class... A> void error(A&&... a) { write(Level::error, "error", std::forward<A>(a)...); }

}  // namespace specdec::log
