// PLACEHOLDER while the owning module is written; replaced by the real command.
#include <iostream>

#include "cli/commands.h"

namespace specdec::cli {
int cmd_run(const Args&) {
  std::cerr << "specdec run: not built yet\n";
  return 1;
}
}  // namespace specdec::cli
