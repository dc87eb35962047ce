// CUDA verification: one block of math::kLanes threads per sequence. The block runs
// math::verify_row in lockstep; gpu::GpuRowOps (row_ops_gpu.cuh) does the row-wide work
// (argmax, sampling, residual masses) with one lane per thread, producing the same lane
// masses and tokens as the CPU sweep.
#include <vector>

#include "kernels/cpu/kernels_internal.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/row_ops_gpu.cuh"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace specdec::kernels {

namespace {

__global__ void verify_kernel(VerifyArgs args) {
  __shared__ gpu::RowOpsShared shared;
  gpu::GpuRowOps ops(shared);
  const int64_t b = blockIdx.x;
  const math::RowView row = math::row_view(args, b);
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
  // Row errors (bad token, bad uniform, ...) come back as negative counts.
  detail::raise_first_bad_sequence(who, args.n_accepted, args.out_tokens, args.batch, args.gamma + 1,
                                   detail::throw_row_error);
}

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace specdec::kernels
