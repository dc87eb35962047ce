#pragma once
// The strategy registry: a name table and one factory (DESIGN principle 3).
// Adding a strategy = one new file + one line in registry.cpp + its tests; a strategy built
// outside the library (examples/) is one file + one register_strategy line (docs/adding.md).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace specdec::strategies {

// What a run of a strategy needs from whoever runs it (the harness, the CLI), so that they
// never read parameter names (DESIGN principle 3).
struct StrategyNeeds {
  bool draft_model = false;   // Request::draft must be set
  int64_t draft_length = 0;   // draft tokens per round (gamma); 0 = not speculative
  std::string drafter;        // the drafter that will run ("" = none)
};

struct StrategyInfo {
  std::string name;
  std::string description;              // one line
  std::vector<ParamSpec> params;        // strategy-specific parameters with defaults
  // Built from resolved params: it reads its typed struct (Params::typed<T>()), not the text.
  std::function<std::unique_ptr<Strategy>(const Params&)> factory;
  // From the resolved parameters and whether a draft model is configured (a drafter named
  // "auto" depends on it). Empty: the strategy needs nothing (StrategyNeeds{}).
  std::function<StrategyNeeds(const Params& resolved, bool have_draft_model)> needs = nullptr;
  // Parses the resolved text into the strategy's typed struct, with its range checks, and keeps
  // it in the params (Params::set_typed), once, in resolve(). declare_params (param_table.h)
  // sets it and `params` from one ParamTable. Empty: no struct of its own.
  std::function<void(Params& resolved)> parse = nullptr;
  // Decodes under a structured-output constraint (json_schema, regex, grammar, response_format).
  bool takes_constraint = false;
};

// Logits-processor parameters shared by every strategy (temperature, top_k, top_p, min_p,
// repetition_penalty, and the structured-output keys) with their defaults.
const std::vector<ParamSpec>& processor_params();
// The processors resolve() parsed and range-checked (Params::typed<sampling::ProcessorConfig>).
const sampling::ProcessorConfig& processor_config(const Params& resolved);

const std::vector<StrategyInfo>& all();
// Adds a strategy from outside the library (examples/register.cpp) after the built-in ones. The
// table is made at its first read (all(), find(), ...), so call this before: at the start of
// main(); later it is an error, as is a name taken (then at the first read).
void register_strategy(StrategyInfo info);
// Throws specdec::Error listing the valid names.
const StrategyInfo& find(const std::string& name);
// Does the strategy take parameter `key` (its own schema or a processor parameter)?
bool takes_param(const StrategyInfo& info, const std::string& key);
// Checks every key against the strategy's schema (+ processor params), fills defaults and
// checks that values parse. An unknown key is an error listing the valid ones. The structured-
// output keys are parsed into Params::constraint (kept from `given` when their values match).
// Then, once, the typed values: the processors (processor_config) and the strategy's own struct
// (StrategyInfo::parse, with its range checks), kept beside the text (Params::typed<T>()).
// The caller that holds the strategy's entry (find) passes it; the name is looked up otherwise.
Params resolve(const StrategyInfo& info, const Params& given);
Params resolve(const std::string& name, const Params& given);
// resolve() + factory; params already resolved for `name` (Params::resolved_for) are not
// resolved again.
std::unique_ptr<Strategy> create(const std::string& name, const Params& given);
// info.needs(resolved, have_draft_model), or StrategyNeeds{} for a strategy without one; by name,
// of find(name).
StrategyNeeds strategy_needs(const StrategyInfo& info, const Params& resolved, bool have_draft_model);
StrategyNeeds strategy_needs(const std::string& name, const Params& resolved, bool have_draft_model);

}  // namespace specdec::strategies
