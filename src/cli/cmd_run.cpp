// `specdec run EXPERIMENT.yaml [--out DIR] [--set key.path=value ...] [--resume] [--cells A:B]`
// `specdec run EXPERIMENT.yaml --executor slurm [--slurm-opt KEY=VALUE ...]`: see harness/slurm.h.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "harness/experiment.h"
#include "harness/plan.h"
#include "harness/results.h"
#include "harness/runner.h"
#include "harness/slurm.h"

namespace specdec::cli {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// --executor slurm: plans the shards and writes the scripts (a new run), or on --resume finds
// the shards that did not finish; then submits them and the merge job unless --no-submit.
int run_on_slurm(const harness::ExperimentConfig& cfg, const harness::Plan& plan,
                 const harness::RunOptions& ro, harness::SlurmOptions so, bool submit) {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  SD_CHECK(n > 0, "--executor slurm: cannot find the specdec binary (/proc/self/exe)");
  so.specdec = exe;
  so.workdir = fs::current_path().string();
  harness::SlurmRun run;
  std::vector<int64_t> tasks;
  if (!ro.resume) {
    run = harness::prepare_slurm_run(cfg, plan, ro.out_dir.empty() ? harness::new_run_dir(ro.results_root, cfg.name)
                                                                   : ro.out_dir, so);
    for (const auto& s : run.shards) tasks.push_back(s.task);
    std::cout << "run folder: " << run.dir << "\nshards: " << run.shards.size() << " array tasks over "
              << plan.cells.size() << " cells" << (run.unit == "prompts" ? " (split by prompts)" : "") << "\n";
  } else {
    SD_CHECK(!ro.out_dir.empty(), "--executor slurm --resume needs --out RUN_DIR (the folder of the slurm run)");
    run = harness::load_slurm_run(ro.out_dir);
    harness::check_same_experiment(run, cfg);
    SD_CHECK(so.shards == 0 || so.shards == static_cast<int64_t>(run.shards.size()), "--slurm-shards ", so.shards,
             ": the run in '", run.dir, "' was planned with ", run.shards.size(), " shards");
    if (submit) {
      const auto active = harness::active_jobs(run);
      std::string ids;
      for (const auto& a : active) ids += " " + a;
      SD_CHECK(active.empty(), "--resume: jobs of '", run.dir, "' are still pending or running:", ids,
               "; wait for them (squeue) or cancel them (scancel)");
    }
    harness::write_slurm_scripts(run, cfg, so);  // new --slurm-opt / --slurm-setup apply
    const auto states = harness::shard_states(run);
    for (const auto& st : states)
      if (!st.finished()) tasks.push_back(st.shard.task);
    std::cout << "run folder: " << run.dir << "\n";
    if (tasks.empty() && fs::exists(fs::path(run.dir) / "report.md")) {
      std::cout << "every shard finished and the run is merged: " << run.dir << "/report.md\n";
      return 0;
    }
    std::cout << (tasks.empty() ? "every shard finished; the merge remains\n"
                                : "unfinished shards to resubmit:\n" + harness::describe_unfinished(run, states));
  }
  const std::string sd = run.dir + "/slurm";
  if (!submit) {
    std::cout << "scripts: " << sd << "/array.sbatch, " << sd << "/merge.sbatch (not submitted)\nsubmit with:\n";
    for (const auto& c : harness::submit_commands(run, tasks)) std::cout << "  " << c << "\n";
    return 0;
  }
  const auto sub = harness::submit_slurm_run(run, tasks);
  if (!sub.array_job.empty()) std::cout << "array job " << sub.array_job << " (" << tasks.size() << " tasks)\n";
  std::cout << "merge job " << sub.merge_job << (sub.array_job.empty() ? "" : " (after every task succeeded)")
            << "\nwatch: squeue -j " << (sub.array_job.empty() ? "" : sub.array_job + ",") << sub.merge_job
            << "; logs in " << sd << "/logs/\nresults: " << run.dir << "/report.md once the merge job ends\n"
            << "a failed task: `specdec merge " << run.dir << "` lists it with its log; `specdec run " << sd
            << "/experiment.yaml --executor slurm --resume --out " << run.dir << "` resubmits what did not finish\n";
  return 0;
}

}  // namespace

int cmd_run(const Args& args) {
  po::options_description opts("specdec run EXPERIMENT.yaml [options]\n\n"
                               "Runs every cell (strategy x sweep point) of the experiment, interleaved with its "
                               "autoregressive\nbaseline, runs the distribution checks, and writes "
                               "results/<experiment>/<run-id>/.\nExit codes: 0 ok, 1 bad input, 2 a failed check, "
                               "130 interrupted (finished cells are kept; use --resume)\n\noptions");
  std::string out, results_root = "results", cells, executor = "local";
  harness::SlurmOptions slurm;
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  opts.add_options()("help,h", "show this help")(
      "out,o", po::value(&out), "run folder (default: <results-root>/<experiment>/<UTC run id>)")(
      "set,s", po::value(&sets)->composing(), "override a key: --set key.path=value (YAML value), repeatable")(
      "resume", "continue the run in --out (default: the latest run of this experiment), skipping finished cells")(
      "results-root", po::value(&results_root), "folder holding the experiments' results (default: results)")(
      "quiet,q", "no progress output on stderr")(
      "threads-oversubscribe", "allow models.threads above the cores this process may use (slower on a memory-bound engine)")(
      "cells", po::value(&cells), "run only the planned cells A to B-1 (0-based; \"A:\" to the last): a shard of an "
                                  "interleave: cell experiment (merge shards with specdec merge)")(
      "executor", po::value(&executor), "local (default: run here) or slurm (one Slurm array task per shard, then a "
                                        "merge job; see docs/slurm.md)")(
      "slurm-opt", po::value(&slurm.sbatch)->composing(), "slurm: an sbatch option KEY=VALUE for every job, e.g. "
                                                           "partition=short, account=proj, time=04:00:00; repeatable")(
      "slurm-setup", po::value(&slurm.setup)->composing(), "slurm: a shell line the jobs run first, e.g. "
                                                            "'module load gcc'; repeatable")(
      "slurm-shards", po::value(&slurm.shards), "slurm: number of array tasks (default: one per cell; interleave: "
                                                "prompt: one per 20 prompts)")(
      "no-submit", "slurm: write RUN_DIR/slurm/*.sbatch and print the sbatch commands instead of submitting");
  po::variables_map vm;
  if (auto code = parse_command("run", args, opts, 1, "EXPERIMENT.yaml", positional, vm)) return *code;
  const std::string& experiment = positional[0];
  const bool on_slurm = executor == "slurm";
  SD_CHECK(executor == "local" || on_slurm, "--executor '", executor, "': expected local or slurm");
  for (const char* o : {"slurm-opt", "slurm-setup", "slurm-shards", "no-submit"})
    SD_CHECK(on_slurm || !vm.count(o), "--", o, " applies to --executor slurm only");
  SD_CHECK(!on_slurm || cells.empty(), "--cells: --executor slurm chooses each task's cells itself");
  SD_CHECK(!vm.count("slurm-shards") || slurm.shards >= 1, "--slurm-shards ", slurm.shards, ": expected 1 or more");
  const harness::ExperimentConfig cfg = harness::load_experiment(experiment, sets);
  const harness::Plan plan = harness::make_plan(cfg);
  check_plan_strategies(cfg, plan);  // before the run folder is created
  harness::RunOptions ro;
  ro.out_dir = out;
  ro.results_root = results_root;
  ro.resume = vm.count("resume") != 0;
  ro.progress = vm.count("quiet") == 0;
  ro.threads_oversubscribe = vm.count("threads-oversubscribe") != 0;
  if (on_slurm) {
    slurm.threads_oversubscribe = ro.threads_oversubscribe;
    return run_on_slurm(cfg, plan, ro, slurm, vm.count("no-submit") == 0);
  }
  if (!cells.empty()) std::tie(ro.cells_begin, ro.cells_end) = harness::parse_index_range(cells, "--cells");
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
