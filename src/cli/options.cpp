#include "cli/options.h"

#include <iostream>

#include "core/error.h"
#include "strategies/registry.h"

namespace specdec::cli {

namespace po = boost::program_options;

std::optional<int> parse_command(const std::string& command, const Args& args, const po::options_description& opts,
                                 int n_positional, const std::string& positional_usage,
                                 std::vector<std::string>& positional, po::variables_map& vm) {
  po::options_description hidden;
  hidden.add_options()("positional", po::value(&positional));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("positional", n_positional);
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "specdec " << command << ": " << e.what() << "\n" << opts;
    return 1;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  // n_positional < 0: at least -n_positional of them.
  if (n_positional >= 0 ? static_cast<int>(positional.size()) != n_positional
                        : static_cast<int>(positional.size()) < -n_positional) {
    std::cerr << "specdec " << command << ": missing " << positional_usage << "\n" << opts;
    return 1;
  }
  return std::nullopt;
}

void check_plan_strategies(const harness::ExperimentConfig& cfg, const harness::Plan& plan) {
  for (const auto& pc : plan.cells) {
    try {
      strategies::create(pc.cell.strategy, pc.resolved);
    } catch (const Error& e) {
      fail(cfg.file, ": strategy '", pc.cell.label, "' (cell ", pc.cell.key, "): ", e.what());
    }
  }
}

}  // namespace specdec::cli
