// The `specdec` command: run_main (dispatch.cpp) finds the subcommand's function (one per
// cmd_<name>.cpp). examples/main.cpp is the same with the worked examples registered first.
#include "cli/commands.h"

int main(int argc, char** argv) { return specdec::cli::run_main(argc, argv); }
