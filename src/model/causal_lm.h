#pragma once
// The model interface every strategy sees, and the loader that builds one from a file.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/kv_cache.h"

namespace specdec::tokenizer { class Tokenizer; }

namespace specdec::model {

struct ModelConfig {
  std::string arch;            // "llama" (also SmolLM2), "qwen2", "gpt2"
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;           // trained context length
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t d_ff = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  std::string rope_scaling_type;  // "", "linear", "llama3", ...
  double rope_scaling_factor = 1.0;
  // llama3 scaling only (HF rope_scaling.low_freq_factor / high_freq_factor /
  // original_max_position_embeddings); added by the model owner, defaults as Llama 3.1.
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_orig_ctx = 8192;
  bool tie_embeddings = false;
  bool qkv_bias = false;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;

  // A cache for `batch` sequences of up to max_seq positions.
  virtual KVCache make_cache(int64_t batch, int64_t max_seq) const = 0;

  // tokens:    [B, T] int64
  // start_pos: [B]    position of tokens[b][0]; must equal cache.length(b) (positions
  //                   >= start_pos[b] are overwritten, so a rollback is just a smaller start)
  // returns:   [B, T, V] float32 logits. Writes K/V of the T positions into `cache` and
  //            sets cache.length(b) = start_pos[b] + T.
  virtual at::Tensor forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                             KVCache& cache) = 0;

  // Bytes of weights read per decoded token (the memory-bound floor is this / bandwidth).
  virtual int64_t weight_bytes() const = 0;
};

// How to load a model. `path` is a .gguf file, a Hugging Face directory (config.json +
// *.safetensors + tokenizer.json), or "tiny-llama"/"tiny-gpt2" for a seeded random model.
struct ModelSpec {
  std::string name;
  std::string path;
  std::string dtype = "float32";  // "float32" | "bfloat16" (weights of linear layers)
  int threads = 0;                // 0: all cores
  bool threads_oversubscribe = false;  // allow more threads than the hardware runs at once
  uint64_t seed = 0;              // tiny random models only
};

struct LoadedModel {
  ModelSpec spec;
  std::shared_ptr<CausalLM> model;
  std::shared_ptr<tokenizer::Tokenizer> tokenizer;
};

// Loads weights (dequantised to fp32) and the tokenizer from the same file/dir.
// Throws specdec::Error naming the file and what is wrong.
LoadedModel load(const ModelSpec& spec);

// Sets the engine's threads (core/parallel.h; 0: all cores) and keeps LibTorch's own
// intra-op threads at 1. More threads than the hardware has are refused unless
// allow_oversubscribe.
void set_threads(int threads, bool allow_oversubscribe = false);

}  // namespace specdec::model
