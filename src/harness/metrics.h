#pragma once
// What one finished cell measured, and its check verdicts. Serialised as one JSON line in
// cells.jsonl (the durable record --resume reads) and gathered into metrics.json.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/load.h"
#include "harness/sweep.h"
#include "strategies/phases.h"

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
  // Spec-Bench's definitions. A question's speed is its generated tokens over its wall time,
  // every turn and its prefill included; mean_speedup = mean speed of the candidate over the
  // category's questions (and repeats) / the same mean of the baseline.
  double mean_tok_s = 0, mean_baseline_tok_s = 0, mean_speedup = 0;
  double tau = 0;            // mean accepted tokens (see CellMetrics::tau)
};

// Where one side's measured generations spent their wall time (strategies::PhaseTimes summed
// over every measured generation of the cell; warm-up and check runs are not included).
struct PhaseBreakdown {
  strategies::PhaseTimes ms;   // total ms per phase
  double wall_ms = 0;          // total wall time of those generations, timed around generate()
  int64_t n_rounds = 0;        // speculative rounds, or decode steps (target forwards after prefill)
  int64_t n_generations = 0;   // 0: the side did not run (no baseline, or an old record)
  double fraction(double strategies::PhaseTimes::*phase) const { return wall_ms > 0 ? ms.*phase / wall_ms : 0; }
  double per_round(double strategies::PhaseTimes::*phase) const { return n_rounds ? ms.*phase / n_rounds : 0; }
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
  double alpha = 0;
  // Mean tokens per target forward that yields tokens, the bonus token included (Spec-Bench's
  // "mean accepted tokens"): generated / verification rounds for speculative decoding (its
  // prompt forward yields no token), generated / forwards otherwise, so autoregressive
  // decoding is exactly 1.00. Summed over generations.
  double tau = 0;
  // Spec-Bench's overall speedup over all questions (see CategoryMetrics), and the same ratio
  // of decode speeds alone (prefill time and the prefill's token left out).
  double mean_tok_s = 0, mean_baseline_tok_s = 0, mean_speedup = 0, decode_speedup = 0;
  std::vector<double> acceptance_per_position;  // [gamma_max]: accepted_i / drafted_i
  // The controller's decisions (strategies::Stats::gamma_rounds, n_aside_tokens) summed: rounds
  // by chosen draft length (index 0: stepped aside) and the tokens emitted in rounds at 0;
  // empty / 0 in records written before they existed.
  std::vector<int64_t> gamma_rounds;
  int64_t n_aside_tokens = 0;
  // Several drafters: each one's rounds, drafted and accepted tokens (Stats::per_drafter),
  // summed; empty with one drafter.
  struct DrafterTotals {
    int64_t rounds = 0, drafted = 0, accepted = 0;
  };
  using PerDrafter = std::map<std::string, DrafterTotals>;
  PerDrafter per_drafter;
  double aside_round_share() const;  // rounds at 0 / rounds with a recorded decision (0 if none)
  double aside_token_share() const;  // n_aside_tokens / n_generated
  // Structured output's forced tokens (strategies::Stats::n_forced: drafted without the drafter)
  // summed over the measured generations; 0 without a constraint and in older records.
  int64_t n_forced = 0;
  double forced_share() const;  // n_forced / n_generated
  // Draft tokens the grammar refused where they stood (strategies::Stats::n_refused: their
  // parent's masked target row gives them probability 0, so each was rejected) summed likewise;
  // 0 where every drafter drafts inside the grammar (draft_mask) and in older records.
  int64_t n_refused = 0;
  double refused_share() const;  // n_refused / n_drafted
  // Its jump-forward tokens (speculative's jump_forward: strategies::Stats::n_jump_drafted,
  // n_jump) summed likewise: drafted, and accepted.
  int64_t n_jump_drafted = 0, n_jump = 0;
  double jump_share() const;  // n_jump / n_generated
  double draft_step_ms = 0, target_step_ms = 0, cost_ratio = 0;
  double predicted_speedup = 0, measured_over_predicted = 0;
  PhaseBreakdown phases;           // the candidate's
  PhaseBreakdown baseline_phases;  // the interleaved baseline's (n_generations 0 when none)
  LoadSample load;                 // machine load while the cell was measured (warm-up included)
  std::map<std::string, CategoryMetrics> categories;
  std::vector<CheckOutcome> checks;
  // checks.valid: the candidate's measured outputs under a constraint, and of them those that
  // are whole strings of its language (samples.jsonl "valid"); both 0 when none was counted.
  int64_t n_constrained = 0, n_valid = 0;
  double wall_s = 0;
  bool checks_passed() const;
};

nlohmann::json to_json(const CellMetrics& m);
// Throws specdec::Error on a bad record. "phases", "baseline_phases" and "load" are optional
// (records written before they existed read as not measured / load unknown).
CellMetrics cell_from_json(const nlohmann::json& j);

// {"wall_ms", "n_rounds", "n_generations", "ms": {phase: ms}, "fraction": {phase: of wall}};
// every phase of strategies::PhaseTimes::fields(), draft_catchup included.
nlohmann::json to_json(const PhaseBreakdown& p);
nlohmann::json to_json(const LoadSample& l);
// {phase: ms} for every phase of strategies::PhaseTimes::fields(); missing phases read as 0.
nlohmann::json to_json(const strategies::PhaseTimes& t);
strategies::PhaseTimes phase_ms_from(const nlohmann::json& ms);
// Stats::per_drafter (or CellMetrics::per_drafter) as {name: {"rounds", "drafted", "accepted"}},
// and back (adding into `into`).
template <class Counts>
nlohmann::json per_drafter_json(const std::map<std::string, Counts>& per_drafter) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, c] : per_drafter)
    j[name] = {{"rounds", c.rounds}, {"drafted", c.drafted}, {"accepted", c.accepted}};
  return j;
}
void add_per_drafter(const nlohmann::json& j, CellMetrics::PerDrafter& into);
LoadSample load_from_json(const nlohmann::json& j);

struct PlannedCell;  // harness/plan.h

// The samples.jsonl lines of one cell's side ("candidate", "baseline", ...), in file order.
std::vector<const nlohmann::json*> lines_of(const std::vector<nlohmann::json>& samples, const std::string& cell,
                                            const std::string& role);
// A cell's figures from the samples.jsonl lines of its measured generations (candidate and
// autoregressive baseline; `base_lines` empty when the cell is its own baseline). Both
// interleave modes and resumed runs compute every figure here and nowhere else (the runner,
// runner.h); checks and load are the caller's to add.
CellMetrics cell_metrics(const PlannedCell& pc, const std::vector<const nlohmann::json*>& cand_lines,
                         const std::vector<const nlohmann::json*>& base_lines);

}  // namespace specdec::harness
