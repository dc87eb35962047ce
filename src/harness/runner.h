#pragma once
// Runs an experiment: loads the models, measures every cell (candidate interleaved with
// its autoregressive baseline), runs the distribution checks, and commits each finished
// cell to the run folder at once (see results.h for durability and --resume).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/experiment.h"

namespace specdec::harness {

struct RunOptions {
  std::string out_dir;       // run folder; default <results_root>/<experiment>/<run-id>
  std::string results_root = "results";
  bool resume = false;       // continue out_dir (or the latest run of the experiment)
  bool progress = true;      // progress on stderr
  bool threads_oversubscribe = false;  // allow models.threads above the cores (--threads-oversubscribe)
  // interleave: cell: run only the planned cells [cells_begin, cells_end) (cells_end -1: to the
  // last), a shard of the experiment (`specdec run --cells A:B`, one Slurm array task each).
  int64_t cells_begin = 0, cells_end = -1;
  // Keys added to env.json (a merged run's "shards": each shard's env, i.e. its node).
  nlohmann::json env_extra = nlohmann::json::object();
};

struct RunOutcome {
  std::string run_dir;
  std::string unit = "cells";  // what the counts count: "cells", or "prompts" (interleave: prompt)
  int64_t n_cells = 0;
  int64_t n_resumed = 0;     // finished units found on disk and skipped
  int64_t n_finished = 0;    // units finished in total (resumed + this process)
  bool interrupted = false;  // SIGINT/SIGTERM arrived; finished cells are on disk
  bool checks_passed = true;
};

RunOutcome run_experiment(const ExperimentConfig& cfg, const RunOptions& opt);

// SIGINT / SIGTERM make the runner stop after the current generate() call. Without these
// handlers the default action kills the process, which is also safe (cells are committed
// atomically), only the report of the unfinished part is not rewritten.
void install_stop_handlers();
bool stop_requested();
// Forgets a stop request, so that a process that runs several experiments (the Python
// bindings' specdec.run) can start the next one after an interrupted one.
void clear_stop_request();

}  // namespace specdec::harness
