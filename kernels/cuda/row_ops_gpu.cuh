#pragma once
// The GPU "Ops" for math::verify_row and math::verify_tree_row: one block of math::kLanes
// threads per sequence, one lane per thread. Every method is a block collective (all threads
// call it with the same arguments and get the same result), and produces the same lane
// masses, totals and tokens as cpu::CpuRowOps: per-lane sums in element order, then serial
// sums and picks over lanes in lane order.
#include <cstdint>

#include "kernels/verify_math.h"

namespace specdec::kernels::gpu {

// The block's shared memory for GpuRowOps (declare one `__shared__ RowOpsShared` per kernel).
struct RowOpsShared {
  double mass[math::kLanes];
  math::ArgMax arg[math::kLanes];
  int64_t token;
  double total;
};

struct GpuRowOps {
  double* s_mass;       // [kLanes] shared
  math::ArgMax* s_arg;  // [kLanes] shared
  int64_t* s_token;     // [1] shared
  double* s_total;      // [1] shared

  __device__ explicit GpuRowOps(RowOpsShared& sh)
      : s_mass(sh.mass), s_arg(sh.arg), s_token(&sh.token), s_total(&sh.total) {}

  __device__ int64_t argmax(const float* row,  // [V]
                            int64_t n_vocab) {
    const int l = threadIdx.x;
    s_arg[l] = math::lane_argmax(row, n_vocab, l);
    __syncthreads();
    // Tree reduction; argmax_merge is order-independent (ties -> lowest index).
    for (int s = math::kLanes / 2; s > 0; s >>= 1) {
      if (l < s) s_arg[l] = math::argmax_merge(s_arg[l], s_arg[l + s]);
      __syncthreads();
    }
    const int64_t token = s_arg[0].index;
    __syncthreads();  // s_arg is reused by the next call
    return token;
  }

  template <class T>
  __device__ int64_t sample(const T* p,      // [V]
                            const float* q,  // [V] or nullptr
                            int64_t n_vocab, double u, double p_scale = 1.0) {
    const int l = threadIdx.x;
    s_mass[l] = math::lane_mass(p, q, n_vocab, l, p_scale);
    __syncthreads();
    if (l == 0) {
      // Serial over kLanes values, in the CPU's order, so the pick is bit-identical.
      const math::LanePick pick = math::pick_lane(s_mass, u);
      *s_token = pick.lane < 0 ? -1 : math::scan_lane(p, q, n_vocab, pick.lane, pick.remaining, p_scale);
    }
    __syncthreads();
    const int64_t token = *s_token;
    __syncthreads();
    return token;
  }

  template <class T>
  __device__ double mass(const T* p,      // [V]
                         const float* q,  // [V] or nullptr
                         int64_t n_vocab, double p_scale) {
    s_mass[threadIdx.x] = math::lane_mass(p, q, n_vocab, threadIdx.x, p_scale);
    return reduce_total();
  }

  template <class T>
  __device__ double materialize(const T* p,      // [V]
                                const float* q,  // [V] or nullptr
                                int64_t n_vocab, double p_scale,
                                double* dst) {   // [V] out, may alias p
    // The caller's threads may still be reading dst (the tree verifier reads r(x) just
    // before updating r in place): wait for them before writing.
    __syncthreads();
    s_mass[threadIdx.x] = math::lane_materialize(p, q, n_vocab, threadIdx.x, p_scale, dst);
    return reduce_total();  // its barriers also publish dst to the whole block
  }

 private:
  __device__ double reduce_total() {
    __syncthreads();
    if (threadIdx.x == 0) *s_total = math::lane_total(s_mass);
    __syncthreads();
    const double total = *s_total;
    __syncthreads();
    return total;
  }
};

}  // namespace specdec::kernels::gpu
