// `specdec merge --out DIR SHARD...`: the shards of one prompt-interleaved experiment (e.g.
// Spec-Bench's 480 questions split with --set prompts.range=A:B over machines) as one run.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "harness/merge.h"
#include "harness/runner.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_merge(const Args& args) {
  po::options_description opts(
      "specdec merge --out DIR SHARD_RUN...\n\n"
      "Merges run folders of one interleave: prompt experiment that differ only in their prompts\n"
      "(prompts.range / prompts.categories shards) into DIR: every finished prompt's samples, then\n"
      "the figures and report recomputed from them (the models are loaded, nothing is generated\n"
      "unless some listed prompt was finished by no shard; then it runs, as --resume would).\n\noptions");
  std::string out;
  std::vector<std::string> shards;
  opts.add_options()("help,h", "show this help")("out", po::value(&out), "merged run folder (new; required)");
  po::variables_map vm;
  if (auto code = parse_command("merge", args, opts, -1, "SHARD_RUN... (one or more run folders)", shards, vm))
    return *code;
  if (out.empty()) {
    std::cerr << "specdec merge: missing --out DIR (the merged run folder)\n" << opts;
    return 1;
  }
  const harness::ExperimentConfig cfg = harness::merge_shards(shards, out);
  harness::RunOptions ro;
  ro.out_dir = out;
  ro.resume = true;
  ro.progress = false;
  harness::install_stop_handlers();
  const auto r = harness::run_experiment(cfg, ro);
  std::cout << "merged " << shards.size() << " shards into " << r.run_dir << "\n" << r.unit << ": " << r.n_finished
            << " of " << r.n_cells << " finished\nreport: " << r.run_dir << "/report.md\n";
  return r.interrupted ? 130 : (r.checks_passed ? 0 : 2);
}

}  // namespace specdec::cli
