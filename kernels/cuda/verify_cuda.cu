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
