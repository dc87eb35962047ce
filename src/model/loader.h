#pragma once
// The pieces of model::load() (causal_lm.h), exposed for tests and tools that want a model
// without its tokenizer.
#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "model/causal_lm.h"
#include "model/device.h"  // parse_device

namespace specdec::io { class GgufFile; }

namespace specdec::model {

// Config of a GGUF file with general.architecture "llama" or "qwen2", from the
// <arch>.* metadata and the token_embd rows (n_vocab). Throws naming file and key.
ModelConfig llama_config_from_gguf(const io::GgufFile& file);

// How a GGUF file's projections, embedding and output head are held (ModelSpec::dtype).
enum class GgufWeights {
  kDequantised,  // float32 / bfloat16: dequantised to `dtype` at load
  kNative,       // native: the file's own blocks as panels (panels.h), fp32 activations
  kNativeQ8,     // native_q8: the same blocks, int8 activations
  kQ4_1,         // q4_1: every one requantised to Q4_1 at load (lossy), int8 activations
};

// Loads a "llama"/"qwen2" GGUF, its weights held as `weights` says (tensors dequantised in
// parallel by default); for arch "llama" the q/k rows are restored to HF order (see
// unpermute_rope_rows). Throws specdec::Error naming the file, tensor and expected shape.
std::shared_ptr<CausalLM> load_llama_gguf(const io::GgufFile& file, at::ScalarType dtype = at::kFloat,
                                          GgufWeights weights = GgufWeights::kDequantised);

// Loads an HF directory (config.json model_type "llama"/"qwen2" + safetensors).
std::shared_ptr<CausalLM> load_llama_hf_dir(const std::string& dir,
                                            at::ScalarType dtype = at::kFloat);

// The same two, built as the ATen engine (llama_aten.h) with linear weights in dtype
// (kFloat or kBFloat16) and everything on `device`; static_steps as make_llama_aten's.
std::shared_ptr<CausalLM> load_llama_gguf_aten(const io::GgufFile& file, at::ScalarType dtype,
                                               at::Device device, bool static_steps = false);
std::shared_ptr<CausalLM> load_llama_hf_dir_aten(const std::string& dir, at::ScalarType dtype,
                                                 at::Device device, bool static_steps = false);

// Throws "<who>: device cuda requested, but ..." unless `device` is usable here: the CPU, or
// CUDA compiled into this LibTorch with a device of that index present.
void check_device(const at::Device& device, const std::string& who = "model");

// The forward engine of a Llama-family model: the CPU kernels of llama.h, or llama_aten.h.
enum class Engine { kPacked, kAten };

// ModelSpec::engine on `device`: "packed", "aten", or "auto" (packed on the CPU, aten on any
// other device). packed on a non-CPU device, or any other value, throws naming it.
Engine parse_engine(const std::string& engine, const at::Device& device,
                    const std::string& who = "model");

// llama.cpp's converter reorders the rows of each head of attn_q/attn_k from HF's
// [two halves] layout to interleaved pairs (row i of half s -> row 2i+s) so GGML can rotate
// adjacent pairs. This undoes it. w: [n_heads * head_dim, in] -> same shape, HF order.
at::Tensor unpermute_rope_rows(const at::Tensor& w, int64_t n_heads);

// "float32" -> kFloat, "bfloat16"/"bf16" -> kBFloat16, "native"/"native_q8"/"q4_1"/"auto" -> kFloat
// (the dtype of whatever is not kept as blocks); anything else throws.
at::ScalarType parse_dtype(const std::string& dtype);

}  // namespace specdec::model
