#pragma once
// Running a command line from a test, as a user would type it: its exit code and its output
// (stdout and stderr together). Shared by the CLI tests.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace specdec::testing_support {

struct Output {
  int code = -1;
  std::string text;  // stdout + stderr
};

// One shell word: s in single quotes, its own quotes escaped.
inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `cmd` through /bin/sh; code is its exit status (-1 when it did not exit normally).
inline Output shell(const std::string& cmd) {
  Output o;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  const int st = ::pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

}  // namespace specdec::testing_support
