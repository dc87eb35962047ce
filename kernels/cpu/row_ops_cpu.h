#pragma once
// The CPU "Ops" for math::verify_row: one thread does a whole row. Exposed in a header so
// tests can wrap it (e.g. plant a wrong residual and check the statistics catch it).
#include <cstdint>

#include "kernels/verify_math.h"

namespace specdec::kernels::cpu {

struct CpuRowOps {
  int64_t argmax(const float* row,  // [V]
                 int64_t n_vocab) const {
    return math::argmax_row(row, n_vocab);
  }

  // Token drawn from norm(max(0, p - q)) (q given) or norm(p) by inverse CDF at u;
  // -1 when that weight has no mass. No allocation: lane masses live on the stack.
  int64_t sample(const float* p,  // [V]
                 const float* q,  // [V] or nullptr
                 int64_t n_vocab, float u) const {
    double mass[math::kLanes];
    math::lane_masses_sweep(p, q, n_vocab, mass);
    const math::LanePick pick = math::pick_lane(mass, u);
    if (pick.lane < 0) return -1;
    return math::scan_lane(p, q, n_vocab, pick.lane, pick.remaining);
  }
};

}  // namespace specdec::kernels::cpu
