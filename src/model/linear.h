#pragma once
// A linear layer y = x W^T (+ b) whose kernel is chosen by the number of rows, by
// measurement (../shared/notes/cpu-toolchain.md): at batch 1 decode is a matrix-vector
// product, verification of 2-8 rows is a skinny GEMM, and prefill a full GEMM; the
// wrong path costs ~2x. Weights may be kept in bf16 (AVX-512 BF16 through oneDNN).
#include <ATen/ATen.h>

namespace specdec::model {

class Linear {
 public:
  Linear() = default;
  // weight: [out, in] float32; bias: [out] or undefined. dtype: at::kFloat or at::kBFloat16.
  Linear(at::Tensor weight, at::Tensor bias, at::ScalarType dtype = at::kFloat);

  // x: [N, in] float32 (contiguous) -> [N, out] float32
  at::Tensor operator()(const at::Tensor& x) const;

  int64_t in_features() const;
  int64_t out_features() const;
  int64_t weight_bytes() const;          // bytes read per forward
  const at::Tensor& weight() const { return w_; }  // [out, in] in the stored dtype

 private:
  at::Tensor w_;   // [out, in]
  at::Tensor b_;   // [out] float32 or undefined
};

}  // namespace specdec::model
