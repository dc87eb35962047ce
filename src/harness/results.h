#pragma once
// The run folder results/<experiment>/<run-id>/ and its durable writes.
// interleave: prompt runs commit per prompt ("unit") instead: the unit's generations go to
// samples.jsonl, then one line to units.jsonl; cells.jsonl is rewritten from the samples after
// each unit, and --resume keeps the samples of finished units only.
// A cell is committed by appending its generations to samples.jsonl and then its record to
// cells.jsonl, each with one write + fsync; a cell without a cells.jsonl line never
// finished. --resume drops samples of unfinished cells and skips finished ones, so an
// interrupted run (Ctrl-C, SIGTERM, even SIGKILL) loses no finished cell and duplicates none.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/metrics.h"
#include "io/durable_file.h"

namespace specdec::harness {

using io::append_durable;  // io/durable_file.h
using io::write_atomic;

class RunStore {
 public:
  explicit RunStore(std::string dir);
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const;  // dir/file

  // Finished cells in commit order. A torn last line (a kill mid-write: no newline at its
  // end, or not JSON) is ignored, and cut before the next commit appends to the file; a
  // malformed line elsewhere is an error naming the file and line.
  std::vector<CellMetrics> load_finished() const;
  // The JSON lines of `file` (same torn-last-line rule).
  std::vector<nlohmann::json> load_records(const std::string& file) const;
  // Rewrites samples.jsonl keeping only lines whose "cell" is in `finished`; returns the
  // number of lines dropped.
  int64_t prune_samples(const std::set<std::string>& finished) const;
  int64_t prune_samples(const std::function<bool(const nlohmann::json&)>& keep) const;
  // Commits one cell: its sample lines, then its metrics record.
  void commit_cell(const std::vector<nlohmann::json>& samples, const CellMetrics& metrics) const;
  // interleave: prompt: commits one unit's samples, then its units.jsonl line.
  void commit_unit(const std::vector<nlohmann::json>& samples, const nlohmann::json& unit) const;
  // Rewrites cells.jsonl atomically (interleave: prompt, where cells derive from the samples).
  void write_cells(const std::vector<CellMetrics>& cells) const;

 private:
  std::string dir_;
};

// One JSON line per record (invalid UTF-8 replaced), as every .jsonl of a run folder holds.
std::string jsonl_text(const std::vector<nlohmann::json>& records);
// interleave: prompt's unit of a samples.jsonl or units.jsonl record: "<repeat>/<prompt id>".
std::string unit_key(int64_t repeat, const std::string& prompt);
std::string unit_key(const nlohmann::json& record);
// The first line where two texts differ, "line N: run has '...', now '...'"; "" if equal.
std::string first_difference(const std::string& a, const std::string& b);

// results/<experiment>/<YYYYmmdd-HHMMSS> under `results_root`.
std::string new_run_dir(const std::string& results_root, const std::string& experiment);
// The most recent run folder of an experiment (lexicographically last run id); "" if none.
std::string latest_run_dir(const std::string& results_root, const std::string& experiment);

// Current UTC time as 2026-01-31T12:00:00Z.
std::string utc_now_iso();

// CPU model, cores, threads, LibTorch version, BLAS, git revision, start time, host name
// (and the Slurm job when run by Slurm).
nlohmann::json collect_env(int threads, const std::string& repo_root);

}  // namespace specdec::harness
