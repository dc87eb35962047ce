#pragma once
// Semantic validation of an ExperimentConfig against the strategy registry and the model
// catalog, and the execution plan `specdec validate` prints (cells, prompts, forwards).
#include <cstdint>
#include <string>
#include <vector>

#include "harness/experiment.h"
#include "harness/sweep.h"
#include "strategies/registry.h"
#include "strategies/strategy.h"

namespace specdec::harness {

struct PlannedCell {
  Cell cell;
  strategies::Params resolved;       // all params, defaults filled, typed values parsed (resolved once)
  strategies::StrategyNeeds needs;   // what the strategy needs (a draft model, its draft length, drafter)
  std::string baseline;              // "" when the cell is its own baseline
  strategies::Params baseline_params;
  bool greedy = false;               // temperature 0
  bool checked = false;              // distribution checks apply
  int64_t batch_size = 1;            // measured sequences generated together (ExperimentConfig::batch_size)
  int64_t n_generations = 0;         // planned generate() calls (measurement + checks)
  int64_t max_target_forwards = 0;   // upper bound (autoregressive: prefill + 1 per token)
};

struct Plan {
  std::vector<PlannedCell> cells;
  // interleave: prompt: the one baseline every cell shares (run once per prompt).
  std::string baseline;
  strategies::Params baseline_params;
  int64_t n_generations = 0;
  int64_t max_target_forwards = 0;
};

// Checks strategies, params, sweep values (each error names file, key path and value) and
// that the models resolve (a missing catalog model names its fetch command). Does not load
// any model.
Plan make_plan(const ExperimentConfig& cfg, bool check_models = true);
std::string format_plan(const ExperimentConfig& cfg, const Plan& plan);

// Every strategy takes the harness's `batch_size`, which never reaches it.
constexpr const char* k_batch_size_param = "batch_size";

}  // namespace specdec::harness
