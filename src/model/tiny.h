#pragma once
// Tiny random Llama models for tests that need no weights: deterministic from a seed,
// with an output head scaled so next-token distributions are spread but not uniform
// (mean max probability ~0.4), which Monte-Carlo tests of speculative sampling need.
#include <cstdint>
#include <memory>

#include "model/causal_lm.h"
#include "model/llama.h"

namespace specdec::model {

// vocab 32, 2 layers, d_model 32, 4 heads / 2 kv heads (head_dim 8), d_ff 64, ctx 256.
ModelConfig tiny_llama_config();

// Random fp32 weights for cfg, a pure function of (cfg, seed). The output head is
// separate (untied) and unscaled (entries ~ N(0, 1/d_model)).
LlamaTensors make_tiny_llama_tensors(const ModelConfig& cfg, uint64_t seed);

// The tiny model: make_tiny_llama_tensors, then the output head multiplied by the factor
// that brings the mean max probability over a seeded probe sequence to target_max_prob.
// Different seeds give different models (use one as target and another as draft).
std::shared_ptr<CausalLM> make_tiny_llama(const ModelConfig& cfg = tiny_llama_config(),
                                          uint64_t seed = 0, double target_max_prob = 0.4);

}  // namespace specdec::model
