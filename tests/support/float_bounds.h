#pragma once
// How far apart two float32 computations of the same transformer may be when they differ only in
// the order of their sums: two engines (the packed engine's panels against ATen's BLAS), two
// kernels (AVX-512 with fused multiply-adds, the portable kernel without; OpenBLAS picks its own
// per CPU), or specdec against a reference. One model for every such bound, so that each test
// states the same thing and holds on every CPU (docs/testing.md, "Float bounds").
//
// The model. A sum of K products in float32 has a rounding error of at most K·u·Σ|a_i·b_i| in
// the worst case, and about √K·u·Σ|a_i·b_i| when the roundings are independent, as they are in
// practice (u = 2^-24, the unit roundoff). Two summation orders differ by about as much. A layer
// chains a handful of such sums (the norm, the projections, attention, the MLP), and the residual
// stream carries each layer's error on to the next, so after `depth` layers the difference,
// relative to the size of the activations (their largest magnitude), grows at most linearly:
//
//     rel(depth) = C · depth · √K · u,   K = the longest reduction (the MLP's down projection)
//
// C covers the sums chained within a layer and the cancellation in them (Σ|a·b| / |Σ a·b|).
// kSafety is C, fixed from measurements with the AVX-512 and the portable panel kernels (holding
// oneDNN and OpenBLAS to AVX2 changed nothing), the largest seen at a sixth of the bound (the
// figures are in docs/testing.md). A real fault is far outside it: a wrong RoPE position, mask or cache slot
// moves the logits by whole units, and a dropped norm weight moves them by 17. An error below
// the rounding noise (one layer's weights off by a few ulps) cannot be seen by any such bound.
#include <cmath>
#include <cstdint>

namespace specdec::testing {

constexpr double kUnitRoundoff = 5.960464477539063e-08;  // 2^-24
constexpr double kSafety = 2.0;

// The largest relative difference (max |a - b| / max |b|) allowed after `depth` layers whose
// longest reduction has length `k_max`.
inline double relative_bound(int64_t depth, int64_t k_max) {
  return kSafety * static_cast<double>(depth) * std::sqrt(static_cast<double>(k_max)) * kUnitRoundoff;
}

// The same as an absolute bound on values whose largest magnitude is `scale` (logits: the output
// projection is one more reduction, so depth = n_layers + 1).
inline double absolute_bound(int64_t depth, int64_t k_max, double scale) { return relative_bound(depth, k_max) * scale; }

}  // namespace specdec::testing
