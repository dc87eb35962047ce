// PLACEHOLDER while the owning module is written; replaced by the real command.
#include <iostream>

#include "cli/commands.h"

namespace specdec::cli {
int cmd_strategies(const Args&) {
  std::cerr << "specdec strategies: not built yet\n";
  return 1;
}
}  // namespace specdec::cli
