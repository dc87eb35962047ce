#pragma once
// Measures for the runner (runner.h): one cell with its interleaved baseline and its checks,
// or (interleave: prompt) one prompt of one side; each generation timed and kept as a
// samples.jsonl line. Its warm-up and traces too. The distribution checks' runs are in
// cell_checks.cpp; the figures come from the lines (metrics.h: cell_metrics).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/experiment.h"
#include "harness/metrics.h"
#include "harness/plan.h"
#include "harness/progress.h"
#include "harness/run_models.h"
#include "harness/runner.h"
#include "strategies/registry.h"

namespace specdec::sampling { class ConstraintState; }

namespace specdec::harness {

// Thrown between generations once SIGINT / SIGTERM arrived (runner.h: stop_requested); the
// runner stops there, with every finished cell on disk.
struct Interrupted {};

inline void check_interrupt() {
  if (stop_requested()) throw Interrupted{};
}

class CellRunner {
 public:
  CellRunner(const ExperimentConfig& cfg, const Models& models, const std::vector<EncodedPrompt>& prompts,
             Progress& progress)
      : cfg_(cfg), models_(models), prompts_(prompts), progress_(progress) {}

  // interleave: cell: one cell with its own interleaved baseline, checks included.
  CellMetrics run(const PlannedCell& pc, std::vector<nlohmann::json>& samples);
  // interleave: prompt: one prompt (all its turns) of one side; appends one line per turn.
  // `params`: the resolved params `s` was created from (its constraint, for checks.valid).
  void converse(strategies::Strategy& s, const strategies::Params& params, const std::string& cell_key,
                const std::string& role, size_t prompt, int64_t repeat, std::vector<nlohmann::json>& samples);
  // One unrecorded generation on the first prompt; batch_size > 1: one batch of the first prompts.
  void warmup(strategies::Strategy& s, int64_t batch_size = 1);
  // strategies[i].trace: one untimed, recorded generation of the cell on the first prompt's
  // first turn (the seed of its first measured repeat), written as a trace page + JSON.
  void trace(const PlannedCell& pc, const std::string& html_path);

 private:
  struct Timed {
    strategies::Result result;
    double wall_ms = 0, ttft_ms = 0;
  };
  // A request on `prompt` (the tokens of one of item's turns), under item's own constraint when it
  // sets one. candidate: a request of the checked strategy (it verifies through planted_ when set).
  strategies::Request request(const PromptItem& item, const Tokens& prompt, uint64_t seed, int64_t max_new,
                              bool candidate = false) const;
  // The request's grammar compiled (once per constraint: a process-wide cache) before its clock
  // starts, so that no timed generation pays for it, the baseline's as little as the candidate's.
  void compile_constraint(const strategies::Request& req, const strategies::Params& params) const;
  // checks.valid: the "valid" field of a measured generation's samples line (Constraint::matches)
  // when its request decoded under a constraint (the request's own, or the strategy's from
  // `params`); null otherwise.
  nlohmann::json validity(const strategies::Request& req, const strategies::Params& params,
                          const strategies::Result& r) const;
  Timed generate(strategies::Strategy& s, const strategies::Request& req, const std::string& what);
  // One Timed per request, batch_size at a time through Strategy::generate_batch (1: generate()
  // one after another), `per_call` requests per call (0: all in one, so the batch never drains
  // between calls; checks use a few batches' worth, so an interrupt is seen soon). A Timed's wall
  // and TTFT are its sequence's, from when it joined the batch.
  std::vector<Timed> generate_many(strategies::Strategy& s, const std::vector<strategies::Request>& reqs,
                                   int64_t batch_size, const std::string& what, size_t per_call);
  nlohmann::json sample_line(const std::string& cell_key, const std::string& role, const EncodedPrompt& p,
                             int64_t repeat, uint64_t seed, const Timed& t) const;
  void measure(const PlannedCell& pc, CellMetrics& m, std::vector<nlohmann::json>& samples);
  // batch_size > 1: every prompt of a repeat in one batched call per side.
  void measure_batch(strategies::Strategy& s, const PlannedCell& pc, const std::string& role, int64_t repeat,
                     std::vector<nlohmann::json>& samples);
  // The distribution checks of a sampled cell, and their inputs (cell_checks.cpp).
  void sampling_checks(const PlannedCell& pc, CellMetrics& m, std::vector<nlohmann::json>& samples);
  // The target's processed distribution of the token after `prompt`, [V]; with `grammar` (a
  // matcher started after `prompt`; null: none) its mask applied to the raw row first.
  static std::vector<double> first_token_probs(model::CausalLM& target, const Tokens& prompt,
                                               const sampling::ProcessorConfig& proc,
                                               sampling::ConstraintState* grammar);
  // Raw target log-likelihood of the first `length` tokens of each generation after `prompt`,
  // `batch` generations per ragged forward (1: one forward each).
  static std::vector<double> logliks(model::CausalLM& target, const Tokens& prompt, const std::vector<Tokens>& gens,
                                     int64_t length, int64_t batch);

  const ExperimentConfig& cfg_;
  const Models& models_;
  const std::vector<EncodedPrompt>& prompts_;
  Progress& progress_;
  std::shared_ptr<kernels::Backend> planted_;  // checks.inject_residual_bug: the candidate's backend
};

}  // namespace specdec::harness
