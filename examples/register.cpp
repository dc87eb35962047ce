// The examples' registry lines: one per strategy or drafter, as in a user's own build.
#include "examples/register.h"

#include "speculative/proposer.h"
#include "strategies/registry.h"

namespace specdec::strategies {
StrategyInfo annealed_info();              // annealed_sampling.cpp
DrafterInfo repeat_last_drafter_info();    // repeat_last_drafter.cpp
}  // namespace specdec::strategies

namespace specdec::examples {

void register_examples() {
  strategies::register_strategy(strategies::annealed_info());
  strategies::register_drafter(strategies::repeat_last_drafter_info());
}

}  // namespace specdec::examples
