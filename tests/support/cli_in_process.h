#pragma once
// A `specdec` command line run inside the test program, through cli::dispatch: what the CLI's
// main() calls (src/cli/main.cpp), so the same exit code and the same text on stdout and stderr,
// without a process start. A start of the CLI costs ~0.35 s on a Zen 5 EPYC, 0.8-1 s under ASan
// there and ~1 s on a Zen 1 EPYC (most of it the dynamic loader and LibTorch's operator
// registration over the ~290 libraries Debian's LibTorch loads: docs/ci.md), where a command on
// a tiny model takes milliseconds. Only for the programs that link the CLI's commands
// (specdec_cli: tests_harness). The tests that use it still run a few command lines through the
// binary, for its exit code and output as a user's shell sees them.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "tests/support/command.h"

namespace specdec::testing_support {

// args: the command line after the program's name. cwd: the working directory to run it in (the
// program's own when empty). stdout and stderr (the file descriptors: printf and std::cout alike)
// are captured together, as shell()'s 2>&1 does.
inline Output run_in_process(const std::vector<std::string>& args, const std::filesystem::path& cwd = {}) {
  const std::filesystem::path here = std::filesystem::current_path();
  if (!cwd.empty()) std::filesystem::current_path(cwd);
  std::cout.flush();
  std::fflush(nullptr);
  FILE* capture = std::tmpfile();
  const int out = ::dup(1), err = ::dup(2);
  ::dup2(::fileno(capture), 1);
  ::dup2(::fileno(capture), 2);
  Output o;
  try {
    o.code = cli::dispatch(args);
  } catch (...) {
    o.code = -1;  // dispatch lets nothing but non-std exceptions through: a crash of the binary
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::dup2(out, 1);
  ::dup2(err, 2);
  ::close(out);
  ::close(err);
  std::rewind(capture);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, capture)) > 0) o.text.append(buf, n);
  std::fclose(capture);
  if (!cwd.empty()) std::filesystem::current_path(here);
  return o;
}

}  // namespace specdec::testing_support
