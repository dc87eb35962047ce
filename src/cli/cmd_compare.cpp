// `specdec compare RUN_A RUN_B`: side-by-side table of two runs' finished cells.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "harness/report.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_compare(const Args& args) {
  po::options_description opts("specdec compare RUN_A RUN_B\n\n"
                               "Prints one row per cell (matched by its key: strategy label + params) with tok/s, "
                               "speedup\nand alpha of both runs and the tok/s ratio B/A. RUN_* are run folders "
                               "(results/<experiment>/<run-id>).\n\noptions");
  std::vector<std::string> positional;
  opts.add_options()("help,h", "show this help");
  po::variables_map vm;
  if (auto code = parse_command("compare", args, opts, 2, "RUN_A RUN_B (two run folders)", positional, vm))
    return *code;
  std::cout << harness::compare_runs(positional[0], positional[1]);
  return 0;
}

}  // namespace specdec::cli
