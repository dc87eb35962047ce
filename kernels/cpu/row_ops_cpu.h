#pragma once
// The CPU "Ops" for math::verify_row and math::verify_tree_row: one thread does a whole row.
// Exposed in a header so tests can wrap it (e.g. plant a wrong residual and check that the
// statistics catch it). Rows p may be float (model output) or double (a materialised
// residual); q is always a float row or nullptr.
#include <cstdint>

#include "kernels/verify_math.h"

namespace specdec::kernels::cpu {

struct CpuRowOps {
  int64_t argmax(const float* row,  // [V]
                 int64_t n_vocab) const {
    return math::argmax_row(row, n_vocab);
  }

  // Token drawn from norm(max(0, s p - q)) (q given) or norm(p) by inverse CDF at u;
  // -1 when that weight has no mass. No allocation: lane masses live on the stack.
  template <class T>
  int64_t sample(const T* p,      // [V]
                 const float* q,  // [V] or nullptr
                 int64_t n_vocab, double u, double p_scale = 1.0) const {
    double mass[math::kLanes];
    math::lane_masses_sweep(p, q, n_vocab, mass, p_scale);
    const math::LanePick pick = math::pick_lane(mass, u);
    if (pick.lane < 0) return -1;
    return math::scan_lane(p, q, n_vocab, pick.lane, pick.remaining, p_scale);
  }

  // Total of the same weights, summed in lane order (block verification's S_i).
  template <class T>
  double mass(const T* p,      // [V]
              const float* q,  // [V] or nullptr
              int64_t n_vocab, double p_scale) const {
    double lanes[math::kLanes];
    math::lane_masses_sweep(p, q, n_vocab, lanes, p_scale);
    return math::lane_total(lanes);
  }

  // dst = the weights max(0, s p - q) (unnormalised); returns their total in lane order.
  // dst may alias p (the tree verifier updates its running residual in place).
  template <class T>
  double materialize(const T* p,      // [V]
                     const float* q,  // [V] or nullptr
                     int64_t n_vocab, double p_scale,
                     double* dst) const {  // [V] out
    double lanes[math::kLanes];
    math::materialize_sweep(p, q, n_vocab, p_scale, dst, lanes);
    return math::lane_total(lanes);
  }
};

}  // namespace specdec::kernels::cpu
