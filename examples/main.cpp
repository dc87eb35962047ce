// build/specdec_with_examples: the `specdec` command with the worked examples registered, as a
// user builds the CLI with their own strategies and drafters (examples/README.md).
#include "cli/commands.h"
#include "examples/register.h"

int main(int argc, char** argv) {
  specdec::examples::register_examples();
  return specdec::cli::run_main(argc, argv);
}
