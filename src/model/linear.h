#pragma once
// A linear layer y = x W^T (+ b). Decode (1 row) and verification (2-9 rows) are bound by
// reading W from memory; library kernels (at::mv, dnnl_sgemm) reach about half the memory
// bandwidth there, our AVX-512 panel kernel all of it (results/engine.md). By default the
// weights are stored packed for that kernel (its AVX2 or portable implementation on a CPU
// without AVX-512, model/panels.h), which then serves every row count, so a row's output does not
// depend on how many rows came with it. Under LinearPolicy::kLibrary W stays [out, in] and the
// kernel is chosen by row count, by measurement (../shared/notes/cpu-toolchain.md). Weights
// may be kept in bf16.
#include <ATen/ATen.h>

#include <string>

#include "model/panels.h"

namespace specdec::model {

// The kernels Linear can run. kAuto picks one (Linear::choose_path in linear.cpp holds the
// measured dispatch table); the others force a path, for tests and benchmarks (a path that
// needs the other weight layout converts it on every call). kDnnl falls back to kGemm when
// oneDNN was not found at build time.
//   kMv     at::mv (OpenBLAS gemv), 1 row, fp32 weights
//   kDnnl   oneDNN dnnl_sgemm, fp32 weights
//   kGemm   at::addmm (OpenBLAS sgemm), fp32 weights
//   kBf16   at::linear on bf16 tensors (oneDNN AVX-512 BF16), bf16 weights; x is rounded
//           to bf16 too
//   kSkinny our panel kernel: W packed in panels of 32 outputs, each one sequential stream;
//           streams W once per call (rows in groups of 8 against a panel in L2), fp32 or bf16
//           weights (widened exactly to fp32), fp32 x and accumulation. AVX-512F or AVX2
//           intrinsics where the CPU has them, else portable C++ (model/panels.h:
//           panels_kernel()).
enum class LinearPath { kAuto, kMv, kDnnl, kGemm, kBf16, kSkinny };

// y = x W^T (+ b) with fp32 x [N, in], w [out, in], b [out] or undefined, through the library
// kernel that suits N (library_path): at::mv (OpenBLAS gemv) for 1 row and oneDNN's dnnl_sgemm
// for 2-8 both stream W once, where OpenBLAS's sgemm packs all of W first, several times the
// product for a few rows; at::addmm after. LinearPolicy::kLibrary's layers, and the ATen
// engine's products on the CPU (linear_aten, llama_aten.h). dnnl_sgemm writes raw memory: no
// autograd through 2-8 rows.
LinearPath library_path(int64_t n_rows);
at::Tensor library_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// True when this CPU can run LinearPath::kSkinny: always, since its portable implementation.
bool linear_has_skinny();

// The layout of Linears constructed from now on (process-wide; for A/B measurements of the
// whole model, set it before loading):
//   kSkinny  (default) packed panels and the panel kernel (AVX-512, AVX2 or portable)
//   kLibrary [out, in] and library kernels only: mv / dnnl / gemm for fp32, at::linear for bf16
enum class LinearPolicy { kSkinny, kLibrary };
void set_linear_policy(LinearPolicy policy);
LinearPolicy linear_policy();

const char* linear_path_name(LinearPath path);

class Linear {
 public:
  Linear() = default;
  // weight: [out, in] float32; bias: [out] or undefined. dtype: at::kFloat or at::kBFloat16.
  Linear(at::Tensor weight, at::Tensor bias, at::ScalarType dtype = at::kFloat);
  // Packed weights as they are, e.g. GGUF blocks (dtype native); bias: [out] or undefined.
  Linear(PanelWeight weight, at::Tensor bias);

  // x: [N, in] float32 (contiguous) -> [N, out] float32
  at::Tensor operator()(const at::Tensor& x) const;
  // Same, through a forced kernel. x: [N, in] float32 -> [N, out] float32.
  // kBf16 needs bf16 weights; kMv, kDnnl, kGemm need fp32 weights; kSkinny takes either.
  at::Tensor forward_path(const at::Tensor& x, LinearPath path) const;
  // The path operator() takes for n_rows rows with these weights.
  LinearPath choose_path(int64_t n_rows) const;

  int64_t in_features() const;
  int64_t out_features() const;
  int64_t weight_bytes() const;          // bytes read per forward
  at::Tensor weight() const;  // [out, in] in the stored dtype, fp32 when native (a copy if packed)
  const at::Tensor& bias() const { return b_; }  // [out] float32 or undefined
  bool packed() const { return panels_.defined(); }
  bool native() const { return panels_.native(); }
  std::string describe() const { return panels_.defined() ? panels_.describe() : dtype_ == at::kFloat ? "f32" : "bf16"; }
  // Rows ids of W as float32: [n] int64 -> [n, in]. Lets a tied embedding table share the
  // LM head's weights in either layout.
  at::Tensor rows(const at::Tensor& ids) const;

 private:
  at::Tensor w_;       // [out, in], or undefined when packed
  PanelWeight panels_;  // for the panel kernel, or empty
  at::Tensor b_;       // [out] float32 or undefined
  int64_t in_ = 0, out_ = 0;
  at::ScalarType dtype_ = at::kFloat;
};

}  // namespace specdec::model
