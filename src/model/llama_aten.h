#pragma once
// The Llama family (llama.h) computed with ATen ops only, so that it runs on any device
// LibTorch has, CUDA included: weights, RoPE tables, KV cache, inputs built from the host
// index vectors and every intermediate live on one device, and forward never reads a device
// tensor from the host. The packed engine (make_llama) is faster on a CPU; this one is the
// GPU path, and its CPU twin is what CI runs (tests/integration/test_model_aten_smollm2.cpp
// checks it against the packed engine on SmolLM2).
//
// Per layer: RMSNorm -> at::linear on the stacked q/k/v weights -> RoPE (HF rotate_half,
// fp32 angles position * inv_freq) -> K/V written into the cache slots by index_put_ ->
// attention of every fed row over the cache through one additive mask (the visible prefix
// and, for a tree, the row's ancestors; GQA by viewing the query heads as [kv head, group])
// -> at::linear; RMSNorm -> SwiGLU MLP. Activations are fp32; bf16 weights multiply
// activations rounded to bf16 with fp32 results, as HF does on GPUs (and as LinearPath::kBf16).
// Unlike the packed engine, a row's result may depend (in the last bits) on the other rows
// of the forward: library matmuls pick kernels by shape, so a tree row equals the same path
// fed as a chain within rounding, not bit for bit. Ragged batches (ForwardOptions::n_fed)
// compute the rows past n_fed[b] as padding, never cached and returned as zeros.
#include <ATen/ATen.h>

#include <memory>

#include "model/causal_lm.h"
#include "model/llama.h"

namespace specdec::model {

// Builds the ATen engine: linear weights (attention, MLP and output head) in `dtype`
// (at::kFloat or at::kBFloat16), norms, embedding and KV cache in fp32, all on `device`.
// Same checks as make_llama (check_llama). Tensors holding GGUF blocks (dtype native /
// native_q8) are refused with a named error: only the packed CPU engine runs them.
// static_steps (ModelSpec::graphs): forwards that fit a bucket of fed tokens run as fixed-shape
// steps over the whole cache, captured as CUDA graphs on a GPU (step_graph.h); on the CPU the
// same steps run uncaptured (the GPU path's twin). Attention then spans every cache slot
// (masked), so a row's logits may differ from the eager path's in the last bits.
// The engine's ATen primitives, autograd-friendly (no in-place ops), which the trained draft
// heads (draft_heads.h) share. x: [N, d] -> [N, d]: HF LlamaRMSNorm, x * rsqrt(mean(x^2) + eps) * w.
at::Tensor rms_norm_aten(const at::Tensor& x, const at::Tensor& w, double eps);
// HF rotate_half RoPE on the two halves of each head: x [N, heads, hd], cos/sin [N, 1, hd/2].
at::Tensor rope_rotate_half(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// y = x W^T (+ b): x [N, in], w [out, in] -> [N, out], at::linear; fp32 on the CPU through
// library_product (linear.h) instead, the library layout's choice by row count (gemv for one row,
// oneDNN's sgemm for 2-8 but under autograd, sgemm after): OpenBLAS's sgemm packs all of W on every
// call, which for a few rows costs several times the product (SmolLM2's 1536 x 576 on a Zen 5 core, one row: 239
// against 44 us; 5 rows through the pool's two threads, bench_model_linear: 153 against 45 us).
// A GPU keeps at::linear. Either may differ in the last bits from the other, as library kernels
// picked by shape do.
at::Tensor linear_aten(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

std::shared_ptr<CausalLM> make_llama_aten(const ModelConfig& cfg, LlamaTensors tensors,
                                          at::ScalarType dtype, at::Device device, bool static_steps = false);

}  // namespace specdec::model
