#pragma once
// A view of a model that runs only some of its layers (self-speculation: Draft & Verify,
// LayerSkip, SWIFT). It shares the base model's weights -- no copy -- and has its own KV caches
// (make_cache), so it can serve as the draft model of any drafter.
#include <memory>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::model {

// keep: layer indices to run, strictly ascending in [0, n_layers), at least one. Throws
// specdec::Error naming the bad entry.
std::shared_ptr<CausalLM> make_layer_subset(std::shared_ptr<CausalLM> base, std::vector<int64_t> keep);

}  // namespace specdec::model
