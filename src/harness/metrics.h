#pragma once
// What one finished cell measured, and its check verdicts. Serialised as one JSON line in
// cells.jsonl (the durable record --resume reads) and gathered into metrics.json.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/sweep.h"

namespace specdec::harness {

struct CheckOutcome {
  std::string name;       // "greedy_equality" | "first_token" | "sequence"
  bool pass = true;
  double p_value = -1;    // -1 when the check is not a hypothesis test
  double significance = 0;
  int64_t n_samples = 0;
  double detectable_tv = -1;  // TV distance detected with 80% power (first_token), -1 if n/a
  std::string detail;     // human-readable summary (mismatch position, per-test p-values)
};

struct Spread {
  double median = 0, min = 0, max = 0, q25 = 0, q75 = 0;
};

struct CategoryMetrics {
  int64_t n_prompts = 0;
  double tok_s = 0;          // candidate, median over repeats
  double speedup = 0;        // median over repeats (0 when no baseline run)
};

struct CellMetrics {
  Cell cell;
  std::string baseline;          // baseline strategy ("" when the cell is its own baseline)
  int64_t n_prompts = 0, n_repeats = 0, n_generated = 0;
  Spread tok_s;                  // candidate tokens per second over repeats
  Spread baseline_tok_s;
  Spread speedup;                // candidate tok/s / baseline tok/s per repeat
  double ms_per_token = 0;       // decode time per token after the first (median over repeats)
  double ttft_ms = 0;            // time to first token, median over generations
  // speculative statistics (zeros otherwise)
  int64_t gamma = 0;             // the cell's gamma param, 0 if none
  int64_t n_drafted = 0, n_accepted = 0, n_rounds = 0, n_target_forwards = 0;
  double alpha = 0, tau = 0;
  std::vector<double> acceptance_per_position;  // [gamma_max]: accepted_i / drafted_i
  double draft_step_ms = 0, target_step_ms = 0, cost_ratio = 0;
  double predicted_speedup = 0, measured_over_predicted = 0;
  std::map<std::string, CategoryMetrics> categories;
  std::vector<CheckOutcome> checks;
  double wall_s = 0;
  bool checks_passed() const;
};

nlohmann::json to_json(const CellMetrics& m);
CellMetrics cell_from_json(const nlohmann::json& j);  // throws specdec::Error on a bad record

}  // namespace specdec::harness
