#pragma once
// The speculative strategy's own parameters, parsed once by the registry (resolve(), through
// speculative_info()'s ParamTable) and read from the resolved params as
// params.typed<SpeculativeParams>(); each drafter keeps its own struct the same way.
#include <cstdint>
#include <string>
#include <vector>

#include "speculative/controller.h"

namespace specdec::strategies {

struct SpeculativeParams {
  int64_t gamma = 0, gamma_max = 0;  // draft tokens per round (start value when adaptive), its bound
  std::string drafter;               // "auto" or a registered drafter (checked by the registry)
  std::string drafters;              // several drafters, chosen per round (adaptive_gamma=cost), as given
  std::vector<std::string> drafter_list;  // drafters' names (registered, distinct); empty: `drafter` alone
  std::string adaptive_gamma;        // off | hf | cost, as given (for messages)
  GammaMode adaptive = GammaMode::off;
  std::string controller_costs, controller_calibrate;  // adaptive_gamma=cost's files ('' = none)
  std::string verify;                // tokenwise | block
  bool block_verify = false;         // verify == block
  bool forced_tokens = true;         // structured output: forced tokens drafted without the drafter
  bool jump_forward = false;         // structured output: the jump-forward text's tokens drafted, verified
  bool draft_mask = true;            // structured output: every drafter drafts inside the grammar
  bool draft_lead = true;            // structured output: model chains take the grammar's lead along their path
  double draft_stop = 0;             // chains and trees stop below this own confidence (0: off)
  std::string synthetic_acceptance;  // off | a | a1,a2,... as given
  std::vector<double> synthetic;     // its values by child rank; empty: off
};

}  // namespace specdec::strategies
