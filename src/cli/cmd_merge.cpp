// `specdec merge --out DIR SHARD...`: the shards of one experiment (prompt ranges of an
// interleave: prompt experiment, e.g. Spec-Bench's 480 questions over machines, or --cells
// ranges of an interleave: cell one) as one run.
// `specdec merge RUN_DIR`: the shards of a `specdec run --executor slurm` run, into RUN_DIR.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "harness/merge.h"
#include "harness/runner.h"
#include "harness/slurm.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_merge(const Args& args) {
  po::options_description opts(
      "specdec merge --out DIR SHARD_RUN...\n"
      "specdec merge RUN_DIR        (the run folder of `specdec run --executor slurm`)\n\n"
      "Merges run folders of one experiment that differ only in their prompts (interleave: prompt;\n"
      "prompts.range / prompts.categories shards) or ran different cells of it (interleave: cell;\n"
      "specdec run --cells A:B) into DIR: every finished prompt's or cell's samples, then the\n"
      "figures and report recomputed from them (the models are loaded, nothing is generated\n"
      "unless some prompt or cell was finished by no shard; then it runs, as --resume would).\n"
      "env.json's `shards` and the report's section \"Nodes\" say which node ran which shard.\n"
      "A slurm run folder merges into itself once every array task finished; otherwise each\n"
      "unfinished task is listed with its log (exit 1).\n\noptions");
  std::string out;
  std::vector<std::string> shards;
  opts.add_options()("help,h", "show this help")("out", po::value(&out), "merged run folder (new; required unless "
                                                                          "merging a slurm run folder)");
  po::variables_map vm;
  if (auto code = parse_command("merge", args, opts, -1, "SHARD_RUN... (one or more run folders)", shards, vm))
    return *code;
  harness::RunOptions ro;
  harness::ExperimentConfig cfg;
  if (out.empty() && shards.size() == 1 && harness::is_slurm_run(shards[0])) {
    cfg = harness::merge_slurm_run(shards[0], ro.env_extra["shards"]);
    out = shards[0];
  } else {
    if (out.empty()) {
      std::cerr << "specdec merge: missing --out DIR (the merged run folder)\n" << opts;
      return 1;
    }
    cfg = harness::merge_shards(shards, out);
    ro.env_extra["shards"] = harness::describe_shards(shards);
  }
  ro.out_dir = out;
  ro.resume = true;
  ro.progress = false;
  harness::install_stop_handlers();
  const auto r = harness::run_experiment(cfg, ro);
  std::cout << "merged " << ro.env_extra["shards"].size() << " shards into " << r.run_dir << "\n" << r.unit << ": "
            << r.n_finished << " of " << r.n_cells << " finished\nreport: " << r.run_dir << "/report.md\n";
  return r.interrupted ? 130 : (r.checks_passed ? 0 : 2);
}

}  // namespace specdec::cli
