// `specdec validate EXPERIMENT.yaml [--set key.path=value ...]`: checks everything a run
// needs (models, strategies, params, sweep) without loading a model, and prints the plan.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "harness/experiment.h"
#include "harness/plan.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_validate(const Args& args) {
  po::options_description opts("specdec validate EXPERIMENT.yaml [options]\n\n"
                               "Checks the experiment without running it (models exist, strategies and parameters "
                               "known,\nsweep well-formed) and prints the plan: cells, prompts, estimated forwards.\n"
                               "Exit codes: 0 valid, 1 invalid (the message names file, key path and value)\n\noptions");
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  opts.add_options()("help,h", "show this help")(
      "set,s", po::value(&sets)->composing(), "override a key: --set key.path=value (YAML value), repeatable");
  po::variables_map vm;
  if (auto code = parse_command("validate", args, opts, 1, "EXPERIMENT.yaml", positional, vm)) return *code;
  const std::string& experiment = positional[0];
  const auto cfg = harness::load_experiment(experiment, sets);
  const auto plan = harness::make_plan(cfg);
  check_plan_strategies(cfg, plan);
  std::cout << harness::format_plan(cfg, plan) << "valid\n";
  return 0;
}

}  // namespace specdec::cli
