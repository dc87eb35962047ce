#pragma once
// The strategy registry: a name table and one factory (DESIGN principle 3).
// Adding a strategy = one new file + one line in registry.cpp + its tests.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace specdec::strategies {

struct StrategyInfo {
  std::string name;
  std::string description;              // one line
  std::vector<ParamSpec> params;        // strategy-specific parameters with defaults
  bool needs_draft_model = false;       // true: Request::draft must be set
  std::function<std::unique_ptr<Strategy>(const Params&)> factory;
};

// Logits-processor parameters shared by every strategy (temperature, top_k, top_p, min_p,
// repetition_penalty) with their defaults.
const std::vector<ParamSpec>& processor_params();
sampling::ProcessorConfig processor_config(const Params& resolved);

const std::vector<StrategyInfo>& all();
// Throws specdec::Error listing the valid names.
const StrategyInfo& find(const std::string& name);
// Checks every key against the strategy's schema (+ processor params), fills defaults and
// checks that values parse. An unknown key is an error listing the valid ones.
Params resolve(const std::string& name, const Params& given);
// resolve() + factory.
std::unique_ptr<Strategy> create(const std::string& name, const Params& given);

}  // namespace specdec::strategies
