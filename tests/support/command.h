#pragma once
// Running a command line from a test, as a user would type it: its exit code and its output
// (stdout and stderr together). Shared by the CLI tests.
#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

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

// `binary ARGS...` as one shell command line, every word quoted.
inline std::string command_line(const std::string& binary, const std::vector<std::string>& args) {
  std::string cmd = quote(binary);
  for (const auto& a : args) cmd += " " + quote(a);
  return cmd;
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

// A folder for one test program's files, <TempDir>/<name>_<pid> (programs run side by side under
// ctest -j): emptied when made, removed when the program ends. Hold it in a function-local static.
struct ProcessDir {
  std::filesystem::path path;
  explicit ProcessDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ProcessDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// A file with this text in this test program's own folder (a controller cost table, say); its path.
inline std::string process_file(const std::string& name, const std::string& text) {
  static const ProcessDir dir("specdec_test_files");
  const std::string path = (dir.path / name).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace specdec::testing_support
