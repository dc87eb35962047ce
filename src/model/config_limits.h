#pragma once
// Bounds on model metadata (config.json, GGUF <arch>.* keys), checked when a config is read and
// before anything is allocated from it: a block_count of 2^32-1 must be an error naming the
// file and key, not std::bad_alloc. The limits are far above every published model
// (Llama 3.1 405B: 126 layers, d_model 16384, d_ff 53248; vocabularies <= 262,144 tokens).
#include <cstdint>
#include <string>

#include "model/causal_lm.h"

namespace specdec::model {

constexpr int64_t k_max_layers = 1024;
constexpr int64_t k_max_d_model = 1 << 16;   // 65,536
constexpr int64_t k_max_heads = 1024;
constexpr int64_t k_max_head_dim = 1024;
constexpr int64_t k_max_d_ff = 1 << 20;      // 1,048,576
constexpr int64_t k_max_vocab = 1 << 22;     // 4,194,304 (as tokenizer::k_max_token_id + 1)
constexpr int64_t k_max_ctx = 1 << 24;       // 16,777,216 positions

// The name under which each field was read, for messages ("llama.block_count", "num_hidden_layers").
struct ConfigKeys {
  std::string n_layers = "n_layers", d_model = "d_model", n_heads = "n_heads", n_kv_heads = "n_kv_heads",
              head_dim = "head_dim", d_ff = "d_ff", n_vocab = "n_vocab", n_ctx = "n_ctx", norm_eps = "norm_eps",
              rope_theta = "rope_theta", rope_scaling_factor = "rope_scaling_factor";
};

// Throws specdec::Error "<source>: <key> = <value> is outside [lo, hi]" (or "must be finite and
// > 0" for norm_eps, rope_theta and the rope scaling factor). n_ctx may be 0 (unknown).
void check_config_limits(const ModelConfig& c, const std::string& source, const ConfigKeys& keys = {});

// One integer metadata value against [lo, hi], same message.
void check_int_range(const std::string& source, const std::string& key, int64_t v, int64_t lo, int64_t hi);

}  // namespace specdec::model
