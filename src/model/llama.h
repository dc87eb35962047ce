#pragma once
// The Llama family as one CausalLM: Llama 2/3, SmolLM2 and Qwen2/2.5 (q/k/v bias).
// Token embedding -> n_layers x (RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP)
// -> final RMSNorm -> output head (tied to the embedding or separate). RoPE rotates the
// two halves of each head (HF rotate_half / GGML NEOX); GGUF "llama" weights, whose q/k
// rows llama.cpp interleaves, are un-permuted by the loader before they get here.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/panels.h"

namespace specdec::model {

// fp32 weights of one decoder layer, in PyTorch [out, in] order.
struct LlamaLayerTensors {
  at::Tensor attn_norm;              // [d_model]
  at::Tensor wq, wk, wv, wo;         // [H*hd, d], [Hkv*hd, d], [Hkv*hd, d], [d, H*hd]
  at::Tensor bq, bk, bv;             // [H*hd], [Hkv*hd], [Hkv*hd] or undefined (no qkv_bias)
  at::Tensor ffn_norm;               // [d_model]
  at::Tensor w_gate, w_up, w_down;   // [d_ff, d], [d_ff, d], [d, d_ff]
  // dtype native: the seven projections as GGUF blocks, packed as they are (panels.h); the
  // fp32 tensors of the projections above are then left undefined.
  struct Native {
    QuantBlocks wq, wk, wv, wo, w_gate, w_up, w_down;
  } native;
};

struct LlamaTensors {
  at::Tensor tok_embd;                   // [n_vocab, d_model]
  std::vector<LlamaLayerTensors> layers;  // n_layers
  at::Tensor out_norm;                   // [d_model]
  at::Tensor output;                     // [n_vocab, d_model], undefined when tied
  at::Tensor rope_freqs;                 // [head_dim/2] divisors of the RoPE frequencies
                                         // (GGUF llama3 scaling), or undefined
  // dtype native: the embedding and output head as GGUF blocks (tok_embd / output undefined);
  // native_output undefined when tied.
  QuantBlocks native_tok_embd, native_output;
  bool native_int8_dot = false;  // dtype native_q8: run them with int8 activations
};

// Builds the model. Linear weights are kept in `dtype` (kFloat or kBFloat16), or as the GGUF
// blocks given in `native` fields (dtype is then ignored); norms, embedding rows and the KV
// cache are fp32. Throws specdec::Error naming the first tensor
// whose shape disagrees with cfg (e.g. "layers[3].wk: shape [64, 32], expected [16, 32]").
std::shared_ptr<CausalLM> make_llama(const ModelConfig& cfg, LlamaTensors tensors,
                                     at::ScalarType dtype = at::kFloat);

// The checks make_llama runs before building, shared with the ATen engine (llama_aten.h):
// cfg's sizes and ranges, every tensor's shape, the RoPE scaling. Throws specdec::Error.
void check_llama(const ModelConfig& cfg, const LlamaTensors& tensors);

// RoPE inverse frequencies [head_dim/2] for cfg (theta, linear or llama3 scaling).
at::Tensor rope_inv_freq(const ModelConfig& cfg);

}  // namespace specdec::model
