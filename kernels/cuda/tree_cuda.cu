// CUDA token-tree verification: one block of math::kLanes threads per sequence, running
// math::verify_tree_row in lockstep with gpu::GpuRowOps doing the row-wide work (the same
// ops as the chain kernel, plus the in-place residual update in the caller's scratch).
#include <vector>

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
    // A negative count carries the status back to the launcher, out[0] the failing entry.
    args.n_accepted[b] = res.status == math::kRowOk ? res.n_accepted : res.status;
    int32_t* out = args.out_tokens + b * (args.max_nodes + 1);
    math::write_tree_output(tree, res, args.path + b * args.max_nodes, out);
    if (res.status != math::kRowOk) out[0] = res.bad_index;
  }
}

}  // namespace

void verify_tree_cuda(const TreeVerifyArgs& args) {
  const char* who = "verify_tree_cuda";
  detail::check_tree_args(args, who);
  detail::require_device(who);
  if (args.batch == 0) return;
  verify_tree_kernel<<<static_cast<unsigned>(args.batch), math::kLanes>>>(args);
  detail::cuda_check(cudaGetLastError(), who, "kernel launch");
  detail::raise_first_bad_sequence(who, args.n_accepted, args.out_tokens, args.batch, args.max_nodes + 1,
                                   detail::throw_tree_error);
}

}  // namespace specdec::kernels
