// CUDA verification: one block of math::kLanes threads per sequence. The block runs
// math::verify_row in lockstep; GpuRowOps does the row-wide work (argmax, sampling) with
// one lane per thread, producing the same lane masses and tokens as the CPU sweep.
#include <vector>

#include "kernels/cpu/kernels_internal.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace specdec::kernels {

namespace {

struct GpuRowOps {
  double* s_mass;           // [kLanes] shared
  math::ArgMax* s_arg;      // [kLanes] shared
  int64_t* s_token;         // [1] shared

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

  __device__ int64_t sample(const float* p,  // [V]
                            const float* q,  // [V] or nullptr
                            int64_t n_vocab, float u) {
    const int l = threadIdx.x;
    s_mass[l] = math::lane_mass(p, q, n_vocab, l);
    __syncthreads();
    if (l == 0) {
      // Serial over kLanes values, in the CPU's order, so the pick is bit-identical.
      const math::LanePick pick = math::pick_lane(s_mass, u);
      *s_token = pick.lane < 0 ? -1 : math::scan_lane(p, q, n_vocab, pick.lane, pick.remaining);
    }
    __syncthreads();
    const int64_t token = *s_token;
    __syncthreads();
    return token;
  }
};

__global__ void verify_kernel(VerifyArgs args) {
  __shared__ double s_mass[math::kLanes];
  __shared__ math::ArgMax s_arg[math::kLanes];
  __shared__ int64_t s_token;
  const int64_t b = blockIdx.x;
  const math::RowView row = math::row_view(args, b);
  GpuRowOps ops{s_mass, s_arg, &s_token};
  const math::RowResult res = math::verify_row(row, ops);
  if (threadIdx.x == 0) {
    // A negative count carries the row status back to the launcher.
    args.n_accepted[b] = res.status == math::kRowOk ? res.n_accepted : res.status;
    int32_t* out = args.out_tokens + b * (args.gamma + 1);
    math::write_row_output(row, res, out);
    if (res.status != math::kRowOk) out[0] = res.bad_index;  // for the launcher's message
  }
}

}  // namespace

void verify_cuda(const VerifyArgs& args) {
  const char* who = "verify_cuda";
  detail::check_verify_args(args, who);
  detail::require_device(who);
  if (args.batch == 0) return;
  verify_kernel<<<static_cast<unsigned>(args.batch), math::kLanes>>>(args);
  detail::cuda_check(cudaGetLastError(), who, "kernel launch");
  // Row errors (bad token, bad uniform, ...) come back as negative counts; copying [B]
  // ints also synchronises, so the caller sees finished outputs.
  std::vector<int32_t> n_acc(static_cast<size_t>(args.batch));
  detail::cuda_check(cudaMemcpy(n_acc.data(), args.n_accepted, sizeof(int32_t) * n_acc.size(),
                                cudaMemcpyDeviceToHost),
                     who, "copy of n_accepted");
  for (int64_t b = 0; b < args.batch; ++b)
    if (n_acc[static_cast<size_t>(b)] < 0) {
      int32_t bad_index = -1;
      detail::cuda_check(cudaMemcpy(&bad_index, args.out_tokens + b * (args.gamma + 1), sizeof(int32_t),
                                    cudaMemcpyDeviceToHost),
                         who, "copy of the failing row");
      detail::throw_row_error(who, b, n_acc[static_cast<size_t>(b)], bad_index);
    }
}

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace specdec::kernels
