// `specdec run EXPERIMENT.yaml [--out DIR] [--set key.path=value ...] [--resume]`
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "harness/experiment.h"
#include "harness/plan.h"
#include "harness/runner.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_run(const Args& args) {
  po::options_description opts("specdec run EXPERIMENT.yaml [options]\n\n"
                               "Runs every cell (strategy x sweep point) of the experiment, interleaved with its "
                               "autoregressive\nbaseline, runs the distribution checks, and writes "
                               "results/<experiment>/<run-id>/.\nExit codes: 0 ok, 1 bad input, 2 a failed check, "
                               "130 interrupted (finished cells are kept; use --resume)\n\noptions");
  std::string out, results_root = "results";
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  opts.add_options()("help,h", "show this help")(
      "out,o", po::value(&out), "run folder (default: <results-root>/<experiment>/<UTC run id>)")(
      "set,s", po::value(&sets)->composing(), "override a key: --set key.path=value (YAML value), repeatable")(
      "resume", "continue the run in --out (default: the latest run of this experiment), skipping finished cells")(
      "results-root", po::value(&results_root), "folder holding the experiments' results (default: results)")(
      "quiet,q", "no progress output on stderr")(
      "threads-oversubscribe", "allow models.threads above the cores this process may use (slower on a memory-bound engine)");
  po::variables_map vm;
  if (auto code = parse_command("run", args, opts, 1, "EXPERIMENT.yaml", positional, vm)) return *code;
  const std::string& experiment = positional[0];
  const harness::ExperimentConfig cfg = harness::load_experiment(experiment, sets);
  check_plan_strategies(cfg, harness::make_plan(cfg));  // before the run folder is created
  harness::RunOptions ro;
  ro.out_dir = out;
  ro.results_root = results_root;
  ro.resume = vm.count("resume") != 0;
  ro.progress = vm.count("quiet") == 0;
  ro.threads_oversubscribe = vm.count("threads-oversubscribe") != 0;
  harness::install_stop_handlers();
  const auto r = harness::run_experiment(cfg, ro);
  std::cout << "run folder: " << r.run_dir << "\n" << r.unit << ": " << r.n_finished << " of " << r.n_cells << " finished ("
            << r.n_resumed << " resumed)\nreport: " << r.run_dir << "/report.md\n";
  if (r.interrupted) {
    std::cerr << "specdec run: interrupted; finished cells are saved. Continue with: specdec run " << experiment
              << " --resume --out " << r.run_dir << "\n";
    return 130;
  }
  if (!r.checks_passed) {
    std::cerr << "specdec run: check failed: see the distribution checks in " << r.run_dir << "/report.md\n";
    return 2;
  }
  std::cout << "checks: all pass\n";
  return 0;
}

}  // namespace specdec::cli
