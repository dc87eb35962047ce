// CUDA token-tree verification: one block of math::kLanes threads per sequence, running
// math::verify_tree_row in lockstep with gpu::GpuRowOps doing the row-wide work (the same
// ops as the chain kernel, plus the in-place residual update in the caller's scratch or the
// workspace). No allocation or synchronisation: bad input comes back through the outputs
// (check_tree_status).

#include "kernels/cpu/kernels_internal.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/row_ops_gpu.cuh"
#include "kernels/kernels.h"
#include "kernels/tree_math.h"

namespace specdec::kernels {

namespace {

__global__ void verify_tree_kernel(TreeVerifyArgs args) {
  __shared__ gpu::RowOpsShared shared;
  gpu::GpuRowOps ops(shared);
  const int64_t b = blockIdx.x;
  const math::TreeView tree = math::tree_view(args, b);
  const math::TreeResult res = math::verify_tree_row(tree, ops);
  if (threadIdx.x == 0) {
    // A negative count carries the status to check_tree_status, out[0] the failing entry.
    args.n_accepted[b] = res.status == math::kRowOk ? res.n_accepted : res.status;
    int32_t* out = args.out_tokens + b * (args.max_nodes + 1);
    math::write_tree_output(tree, res, args.path + b * args.max_nodes, out);
  }
}

}  // namespace

void verify_tree_cuda(const TreeVerifyArgs& args_in, const CudaLaunch& launch) {
  const char* who = "verify_tree_cuda";
  TreeVerifyArgs args = args_in;
  const size_t need = verify_tree_cuda_workspace_bytes(args);  // the [B, V] residual, if not given
  detail::check_workspace(launch, need, who);
  if (need > 0) args.scratch = static_cast<double*>(launch.workspace);
  detail::check_tree_args(args, who);
  SD_CHECK(args.batch <= INT32_MAX, who, ": batch = ", args.batch, " exceeds the grid limit (2^31 - 1)");
  detail::require_device(who);
  if (args.batch == 0) return;
  verify_tree_kernel<<<static_cast<unsigned>(args.batch), math::kLanes, 0, detail::stream_of(launch)>>>(args);
  detail::cuda_check(cudaGetLastError(), who, "kernel launch");
}

}  // namespace specdec::kernels
