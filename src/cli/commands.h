#pragma once
// One function per `specdec` subcommand; each lives in its own cmd_<name>.cpp.
// args excludes the program and command names. Return value is the exit code:
// 0 ok, 1 bad input (message names file/key/value), 2 a failed check.
#include <string>
#include <vector>

namespace specdec::cli {

using Args = std::vector<std::string>;

// `specdec ARGS...` (ARGS: the command line after the program's name): runs the command and
// returns its exit code; what a command throws becomes "specdec <command>: error: <what>" on
// stderr and exit 1 (a failed check: exit 2). run_main calls it; tests make it in-process.
int dispatch(const Args& args);        // dispatch.cpp
// A program's main(): the heap settings, then dispatch of argv[1..]. build/specdec's main.cpp is
// this call, and so is a user's CLI that registers their own strategies first (examples/main.cpp).
int run_main(int argc, char** argv);   // dispatch.cpp

int cmd_tokenize(const Args& args);    // cmd_tokenize.cpp
int cmd_generate(const Args& args);    // cmd_generate.cpp
int cmd_strategies(const Args& args);  // cmd_strategies.cpp
int cmd_models(const Args& args);      // cmd_models.cpp
int cmd_run(const Args& args);         // cmd_run.cpp
int cmd_validate(const Args& args);    // cmd_validate.cpp
int cmd_compare(const Args& args);     // cmd_compare.cpp
int cmd_merge(const Args& args);       // cmd_merge.cpp
int cmd_trace(const Args& args);       // cmd_trace.cpp
int cmd_train_drafter(const Args& args);  // cmd_train_drafter.cpp

}  // namespace specdec::cli
