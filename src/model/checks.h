#pragma once
// Checks shared by the models and the loader: shape text for errors, and the input checks of
// every CausalLM::forward (shapes, start positions against the cache, token ids). Errors name the model ("llama forward", "gpt2 forward") and the bad value.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::model {

// "[2, 3]": shapes in error messages.
std::string shape_str(at::IntArrayRef shape);

// tokens: [B, T] integer ids; start_pos: [B]. `cache_heads` is the number of K/V heads the
// model stores; `max_positions` (> 0) bounds start + T, e.g. a learned position table.
void check_forward_inputs(const std::string& who, const ModelConfig& cfg, int64_t cache_heads,
                          int64_t max_positions, const at::Tensor& tokens,
                          const std::vector<int64_t>& start_pos, const KVCache& cache);

}  // namespace specdec::model
