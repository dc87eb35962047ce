#pragma once
// The model interface every strategy sees, and the loader that builds one from a file.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/model_options.h"

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

// Optional parts of a forward pass. The defaults give a plain chain: fed token t of sequence b
// sits at position start_pos[b] + t and attends to every earlier position.
struct ForwardOptions {
  // Token tree [T] shared by every sequence of the batch, or one tree per sequence [B * T]
  // (sequence b's at entries b*T .. b*T + T - 1, with tree_cached: blocks of tree_cached + T;
  // both Llama engines; with ragged batches the entries past n_fed[b] must still be
  // valid): parents[t] is the fed token that t follows
  // (parents[t] < t), or -1 when t follows the cached prefix directly. Token t attends to the
  // cached prefix [0, start_pos[b]) and to its ancestors among the fed tokens, itself included.
  // Empty: a chain (parents[t] = t - 1). Fed token t is still written to cache slot
  // start_pos[b] + t; after accepting a root-to-node path, move the path's slots together
  // (KVCache::compact) before the next forward.
  std::vector<int32_t> parents;
  // The same entries as `parents` (which then stays empty) as an int64 tensor on the model's
  // device: a tree a drafter grew there, unread. The ATen engine builds its mask and positions
  // from them on the device; the host engines copy them to the host first
  // (read_device_parents in model/checks.h). Nothing checks their values on the host: the tree
  // verifier does, after the round's read.
  at::Tensor device_parents;
  // Growing a tree over several forwards (a drafter expanding it level by level): the first
  // tree_cached nodes of the tree are already in the cache at slots start_pos[b] -
  // tree_cached .. start_pos[b] - 1, and `parents` then has tree_cached + T entries per tree, indexed
  // over all tree nodes (the fed tokens are nodes tree_cached .. tree_cached + T - 1). The
  // visible prefix is [0, start_pos[b] - tree_cached). 0: the tree is all in this forward.
  int64_t tree_cached = 0;
  // Position (RoPE angle, learned position row) of each fed token, [B * T] row-major.
  // Empty: the prefix length plus depth(t), where depth counts t's ancestors among the tree
  // nodes (a chain: start_pos[b] + t).
  std::vector<int64_t> positions;
  // Run only these layers, strictly ascending (self-speculation by layer skipping); the
  // others pass the residual stream through unchanged and keep their cache entries as they
  // were. Empty: all layers.
  std::vector<int64_t> layers;
  // Ragged batches: sequence b feeds only its first n_fed[b] <= T tokens ([B]; 0 allowed, e.g.
  // a finished sequence that keeps its batch slot). Rows t >= n_fed[b] are not cached (the
  // packed engine does not compute them; the ATen engine computes them as padding, for fixed
  // shapes): their logits/hidden rows are zero and their token ids are not read, and
  // cache.length(b) becomes start_pos[b] + n_fed[b]. Each fed row equals the same row fed in a
  // batch of one: bit for bit on the packed CPU engine (llama.h), to ~1e-6 on the ATen engine
  // (llama_aten.h); GPT-2 refuses it.
  // Empty: every sequence feeds all T tokens.
  std::vector<int64_t> n_fed;
  bool logits = true;             // false: skip the output head (hidden states only)
  // k > 0: logits for each sequence's last k fed tokens only, [B, k, V]: row j of sequence b is
  // its fed token max(0, n_fed[b] - k) + j (rows past its last are zero, as unfed rows are). A
  // prefill reads one row of the prompt's T, and the output head is a large share of a forward
  // (the vocabulary's rows: 15-30 % of a small model's weights). An engine may ignore it and
  // return [B, T, V] (as with 0; when T = k that is the same layout): last_logit_rows
  // (checks.h) takes the rows from those.
  int64_t logits_last = 0;
  bool final_hidden = false;      // also return the output head's input (after the final norm)
  int64_t hidden_layer = -1;      // >= 0: also return the residual stream after this layer
};

struct ForwardResult {
  at::Tensor logits;        // [B, T, V] float32 (undefined when !options.logits)
  at::Tensor hidden;        // [B, T, d] final normed hidden state (when options.final_hidden)
  at::Tensor layer_hidden;  // [B, T, d] after layer options.hidden_layer (when >= 0)
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // Where the weights, the caches of make_cache and the results of forward live. The packed
  // CPU engines (llama.h, gpt2.h) are CPU only; the ATen engine (llama_aten.h) may be on CUDA.
  virtual at::Device device() const { return at::Device(at::kCPU); }

  // A cache for `batch` sequences of up to max_seq positions.
  virtual KVCache make_cache(int64_t batch, int64_t max_seq) const = 0;

  // tokens:    [B, T] int64, on the host or on the model's device (a draft loop's own picks:
  //            the ATen engine takes them there without reading them)
  // start_pos: [B]    cache slot of tokens[b][0]; must be <= cache.length(b) (slots
  //                   >= start_pos[b] are overwritten, so a rollback is just a smaller start)
  // Writes K/V of the T fed tokens into slots start_pos[b] .. start_pos[b] + T - 1 and sets
  // cache.length(b) = start_pos[b] + T (with options.n_fed: n_fed[b] instead of T). Every row
  // of the result depends only on its own token, position and attended keys. On the packed
  // Llama engine that holds bit for bit: a tree row equals the same path fed as a chain, and a
  // batch row its batch-1 forward (tests/integration/test_model_tree_smollm2.cpp). GPT-2's and
  // the ATen engine's GEMMs block by the number of rows, so there it holds to ~1e-6.
  virtual ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                                KVCache& cache, const ForwardOptions& options) = 0;

  // A chain: returns [B, T, V] float32 logits.
  at::Tensor forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, KVCache& cache) {
    return forward(tokens, start_pos, cache, ForwardOptions{}).logits;
  }

  // Bytes of weights read per decoded token (the memory-bound floor is this / bandwidth).
  virtual int64_t weight_bytes() const = 0;
  // Bytes of weights held in memory: weight_bytes() plus the embedding tables, each tensor
  // counted once (a tied head and embedding are one). With dtype native about the GGUF file's
  // size; float32 holds every weight dequantised. A layer subset holds none of its own.
  virtual int64_t resident_weight_bytes() const { return weight_bytes(); }
  // Takes ragged batches (ForwardOptions::n_fed), which batched generation needs
  // (strategies/batch.h). Both Llama engines do; GPT-2 refuses n_fed.
  virtual bool ragged_batches() const { return false; }

  // The target's own tables, which trained drafters (EAGLE, Medusa: model/draft_heads.h) reuse
  // frozen. embed: input embedding rows of ids [n] int64 -> [n, d] float32. head_rows: rows of
  // the output head -> [n, d] float32 (logits = hidden . rows^T). output_head: the head applied
  // to final normed hidden states [n, d] -> [n, V] float32, with the weights the forward uses.
  // Engines without them (GPT-2, layer subsets) throw naming the engine.
  virtual at::Tensor embed(const at::Tensor& ids) const;
  virtual at::Tensor head_rows(const at::Tensor& ids) const;
  virtual at::Tensor output_head(const at::Tensor& hidden) const;
};

// How to load a model: the options (model_options.h; threads default 2) and where the weights
// are. `path` is a .gguf file, a Hugging Face directory (config.json + *.safetensors +
// tokenizer.json), or "tiny-llama"/"tiny-gpt2" for a seeded random model.
struct ModelSpec : ModelOptions {
  std::string name;
  std::string path;

  ModelOptions& options() { return *this; }
  const ModelOptions& options() const { return *this; }
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
