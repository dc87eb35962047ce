// `specdec compare RUN_A RUN_B`: side-by-side table of two runs' finished cells.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "harness/report.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_compare(const Args& args) {
  po::options_description opts("specdec compare RUN_A RUN_B\n\n"
                               "Prints one row per cell (matched by its key: strategy label + params) with tok/s, "
                               "speedup\nand alpha of both runs and the tok/s ratio B/A. RUN_* are run folders "
                               "(results/<experiment>/<run-id>).\n\noptions");
  std::vector<std::string> runs;
  opts.add_options()("help,h", "show this help");
  po::options_description hidden;
  hidden.add_options()("runs", po::value(&runs));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("runs", 2);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "specdec compare: " << e.what() << "\n" << opts;
    return 1;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (runs.size() != 2) {
    std::cerr << "specdec compare: need two run folders\n" << opts;
    return 1;
  }
  std::cout << harness::compare_runs(runs[0], runs[1]);
  return 0;
}

}  // namespace specdec::cli
