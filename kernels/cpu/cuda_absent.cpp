// Builds without nvcc still provide every *_cuda launcher, so callers link unchanged and
// get a clear error at run time instead. (The workspace sizes and status checks are host
// code, in cuda_launch.cpp and the CPU files, and work in every build.)
#ifndef SPECDEC_WITH_CUDA
#include "core/error.h"
#include "kernels/kernels.h"

namespace specdec::kernels {

void verify_cuda(const VerifyArgs&, const CudaLaunch&) { fail("verify_cuda: built without CUDA"); }
void verify_tree_cuda(const TreeVerifyArgs&, const CudaLaunch&) { fail("verify_tree_cuda: built without CUDA"); }
void kv_compact_cuda(const CompactArgs&, const CudaLaunch&) { fail("kv_compact_cuda: built without CUDA"); }
void kv_reorder_cuda(float*, const float*, const int64_t*, int64_t, int64_t, const CudaLaunch&) {
  fail("kv_reorder_cuda: built without CUDA");
}
void pick_cuda(const PickArgs&, const CudaLaunch&) { fail("pick_cuda: built without CUDA"); }
bool cuda_available() { return false; }

}  // namespace specdec::kernels
#endif
