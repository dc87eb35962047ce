#pragma once
// A linear layer y = x W^T (+ b) whose kernel is chosen by the number of rows, by
// measurement (../shared/notes/cpu-toolchain.md): at batch 1 decode is a matrix-vector
// product, verification of 2-8 rows is a skinny GEMM, and prefill a full GEMM; the
// wrong path costs ~2x. Weights may be kept in bf16 (AVX-512 BF16 through oneDNN).
#include <ATen/ATen.h>

#include <string>

namespace specdec::model {

// The kernels Linear can run. kAuto picks one from the row count (Linear::choose_path in
// linear.cpp holds the measured dispatch table); the others force a path, for tests and
// benchmarks. kDnnl falls back to kGemm when oneDNN was not found at build time.
//   kMv     at::mv (OpenBLAS gemv), 1 row, fp32 weights
//   kDnnl   oneDNN dnnl_sgemm, fp32 weights
//   kGemm   at::addmm (OpenBLAS sgemm), fp32 weights
//   kBf16   at::linear on bf16 tensors (oneDNN AVX-512 BF16), bf16 weights; x is rounded
//           to bf16 too
//   kSkinny our AVX-512 kernel for few rows: streams W once for up to 8 rows of x, fp32 or
//           bf16 weights (widened exactly to fp32), fp32 x and accumulation. Needs AVX-512F
//           at run time (linear_has_skinny()).
enum class LinearPath { kAuto, kMv, kDnnl, kGemm, kBf16, kSkinny };

// True when this CPU can run LinearPath::kSkinny.
bool linear_has_skinny();

// Which dispatch table kAuto uses (process-wide; for A/B measurements of the whole model):
//   kSkinny  (default) our kernel for 1-8 rows when the CPU has AVX-512F, then library GEMMs
//   kLibrary library kernels only: mv / dnnl / gemm for fp32, at::linear for bf16
enum class LinearPolicy { kSkinny, kLibrary };
void set_linear_policy(LinearPolicy policy);
LinearPolicy linear_policy();

const char* linear_path_name(LinearPath path);

class Linear {
 public:
  Linear() = default;
  // weight: [out, in] float32; bias: [out] or undefined. dtype: at::kFloat or at::kBFloat16.
  Linear(at::Tensor weight, at::Tensor bias, at::ScalarType dtype = at::kFloat);

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
  const at::Tensor& weight() const { return w_; }  // [out, in] in the stored dtype
  const at::Tensor& bias() const { return b_; }    // [out] float32 or undefined

 private:
  at::Tensor w_;   // [out, in]
  at::Tensor b_;   // [out] float32 or undefined
};

}  // namespace specdec::model
