#pragma once
// GPT-2 as one CausalLM: learned token + position embeddings -> n_layers x (LayerNorm,
// multi-head attention with a fused q/k/v projection, LayerNorm, GELU (tanh approximation)
// MLP) -> final LayerNorm -> head tied to the token embedding
// (or a separate lm_head when tie_word_embeddings is false). Weights come from a Hugging
// Face directory (GPT2LMHeadModel names; HF's Conv1D stores [in, out], transposed here),
// a GGUF file with general.architecture = gpt2, or a seeded random "tiny-gpt2".
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::io { class GgufFile; }

namespace specdec::model {

// fp32 weights of one block, in PyTorch [out, in] order.
struct Gpt2LayerTensors {
  at::Tensor ln1_w, ln1_b;    // [d]
  at::Tensor w_qkv, b_qkv;    // [3d, d], [3d]  rows: q, then k, then v
  at::Tensor w_o, b_o;        // [d, d], [d]
  at::Tensor ln2_w, ln2_b;    // [d]
  at::Tensor w_fc, b_fc;      // [d_ff, d], [d_ff]
  at::Tensor w_proj, b_proj;  // [d, d_ff], [d]
};

struct Gpt2Tensors {
  at::Tensor wte;                        // [n_vocab, d]  also the output head (tied)
  at::Tensor wpe;                        // [n_ctx, d]
  std::vector<Gpt2LayerTensors> layers;  // n_layers
  at::Tensor lnf_w, lnf_b;               // [d]
  at::Tensor lm_head;                    // [n_vocab, d], undefined when tied to wte
};

// Builds the model. cfg.arch must be "gpt2", n_kv_heads == n_heads, head_dim * n_heads ==
// d_model. Linear weights (including the tied head) are kept in `dtype` (kFloat or
// kBFloat16); embeddings, norms and the KV cache stay fp32. Positions beyond cfg.n_ctx
// are an error (learned position embeddings). Throws specdec::Error naming the first
// tensor whose shape disagrees with cfg.
std::shared_ptr<CausalLM> make_gpt2(const ModelConfig& cfg, Gpt2Tensors tensors,
                                    at::ScalarType dtype = at::kFloat);

// Reads an HF GPT-2 config.json (model_type "gpt2": vocab_size, n_positions, n_embd,
// n_layer, n_head, n_inner (null -> 4 n_embd), layer_norm_epsilon, activation_function
// "gelu_new"/"gelu_pytorch_tanh"). Throws specdec::Error naming the file and key.
ModelConfig gpt2_config_from_hf(const std::string& config_json_path);

// Loads an HF directory whose config.json says model_type "gpt2": config.json plus
// model.safetensors (or a sharded index), tensor names as GPT2LMHeadModel saves them
// ("transformer.h.0.attn.c_attn.weight"; the bare "h.0..." names of the original OpenAI
// checkpoints are accepted too). The tokenizer is not loaded here.
std::shared_ptr<CausalLM> load_gpt2_hf_dir(const std::string& dir,
                                           at::ScalarType dtype = at::kFloat);

// Loads a GGUF file with general.architecture = gpt2 (llama.cpp tensor names token_embd,
// position_embd, blk.N.attn_qkv, ...), dequantised to fp32 first.
std::shared_ptr<CausalLM> load_gpt2_gguf(const io::GgufFile& file,
                                         at::ScalarType dtype = at::kFloat);

// "tiny-gpt2": vocab 64, 2 layers, d 32, 4 heads, d_ff 128, n_ctx 128.
ModelConfig tiny_gpt2_config();
// Random weights, a pure function of (cfg, seed) (N(0, 0.02) as GPT-2's init, norms ~1).
Gpt2Tensors make_tiny_gpt2_tensors(const ModelConfig& cfg, uint64_t seed);
std::shared_ptr<CausalLM> make_tiny_gpt2(const ModelConfig& cfg = tiny_gpt2_config(),
                                         uint64_t seed = 0, at::ScalarType dtype = at::kFloat);

}  // namespace specdec::model
