#pragma once
// `specdec run EXPERIMENT --executor slurm`: the experiment split into shards, one Slurm array
// task each, every task an ordinary `specdec run` into RUN_DIR/shards/<task>/, then a merge
// job (`specdec merge RUN_DIR`, --dependency=afterok on the array) that merges the shards
// into RUN_DIR itself (harness/merge.h). Slurm does the scheduling; nothing here runs jobs.
//   interleave: cell    a shard is a range of planned cells (`specdec run --cells A:B`); each
//                       cell runs its baseline right before it, so on the same node.
//   interleave: prompt  a shard is a range of prompts (a shard YAML listing them); every
//                       prompt runs the baseline and all cells on one node.
// RUN_DIR/slurm/ holds experiment.yaml (the resolved experiment), plan.json (the shards),
// shard-<task>.yaml (prompt shards), array.sbatch, merge.sbatch, submissions.jsonl (job ids)
// and logs/ (task-<task>_<array job>.log, merge_<job>.log).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/experiment.h"
#include "harness/plan.h"

namespace specdec::harness {

struct SlurmOptions {
  // --slurm-opt KEY=VALUE (or a bare KEY): `#SBATCH --KEY=VALUE` in both scripts, in order.
  std::vector<std::string> sbatch;
  std::vector<std::string> setup;  // --slurm-setup: shell lines before specdec (module load ...)
  int64_t shards = 0;              // array tasks; 0: one per cell, or per 20 prompts
  std::string specdec;             // the specdec binary the jobs run (absolute)
  std::string workdir;             // the jobs' working directory (relative paths resolve there)
  bool threads_oversubscribe = false;
};

struct SlurmShard {
  int64_t task = 0;
  int64_t begin = 0, end = 0;      // cells or prompts [begin, end)
  std::vector<std::string> units;  // their cell keys or prompt ids
};

struct SlurmRun {
  std::string dir;
  std::string unit;  // "cells" or "prompts"
  int64_t repeats = 1;
  std::vector<SlurmShard> shards;
  std::string shard_dir(int64_t task) const;  // dir/shards/<task>
};

// Plans the shards and writes RUN_DIR/slurm/ (nothing is submitted). RUN_DIR must not hold a run.
SlurmRun prepare_slurm_run(const ExperimentConfig& cfg, const Plan& plan, const std::string& run_dir,
                           const SlurmOptions& opt);
// A slurm run folder's plan (an error naming the folder if it is not one).
SlurmRun load_slurm_run(const std::string& run_dir);
// --resume: `cfg` must equal the experiment the run was planned from (else an error naming the
// first differing line).
void check_same_experiment(const SlurmRun& run, const ExperimentConfig& cfg);
// Rewrites array.sbatch and merge.sbatch (--resume with new --slurm-opt / --slurm-setup).
void write_slurm_scripts(const SlurmRun& run, const ExperimentConfig& cfg, const SlurmOptions& opt);

struct ShardState {
  SlurmShard shard;
  int64_t n_done = 0, n_planned = 0;  // finished cells or prompts (x repeats)
  std::string log;                    // the newest task log ("" when it never ran)
  std::string log_tail;               // its last non-empty line
  bool finished() const { return n_done >= n_planned; }
};
std::vector<ShardState> shard_states(const SlurmRun& run);
// "task 2 (cells 2:3): 0 of 1 cells finished; log: .../task-2_41.log: <last line>" per unfinished shard.
std::string describe_unfinished(const SlurmRun& run, const std::vector<ShardState>& states);

// The sbatch command lines that submit `tasks` and the merge job (none: the merge job alone),
// for submitting by hand (--no-submit).
std::vector<std::string> submit_commands(const SlurmRun& run, const std::vector<int64_t>& tasks);
// Submits the array tasks `tasks` with `sbatch --parsable`, then the merge job with
// --dependency=afterok on them (no tasks: the merge job alone); records both in
// RUN_DIR/slurm/submissions.jsonl.
struct Submitted {
  std::string array_job;  // "" when no task was submitted
  std::string merge_job;
};
Submitted submit_slurm_run(const SlurmRun& run, const std::vector<int64_t>& tasks);
// This run's jobs (array tasks as <id>_<task>, the merge job) still pending or running.
std::vector<std::string> active_jobs(const SlurmRun& run);

// `specdec merge RUN_DIR`: every shard must have finished (else an error listing each
// unfinished task with its log); merges them into RUN_DIR (a merge done before is redone) and
// returns the configuration and, for env.json, each shard's env with its task id.
ExperimentConfig merge_slurm_run(const std::string& run_dir, nlohmann::json& shards_env);
bool is_slurm_run(const std::string& dir);

// "A:B" -> [A, B) with B = -1 for "A:" (a --cells value); an error naming `what` otherwise.
std::pair<int64_t, int64_t> parse_index_range(const std::string& text, const std::string& what);

}  // namespace specdec::harness
