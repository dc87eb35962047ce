// CUDA KV-cache compaction and beam reorder. Shared logic: kernels/kv_math.h. No allocation
// or synchronisation: per-sequence statuses go to the caller's workspace.
#include <algorithm>

#include "kernels/cpu/kernels_internal.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/kernels.h"
#include "kernels/kv_math.h"

namespace specdec::kernels {

namespace {

constexpr int kCompactThreads = 256;

// One block per (sequence, head) slab, grid (max(H, 1), B). Threads walk the flattened (i, d)
// elements in tiles of ascending i; each tile is read completely before it is written, which
// together with dst_start + i <= src_pos[i] < src_pos[j > i] makes the in-place move safe.
// A bad keep list (the caller should have run check_compact_args on the host) moves nothing
// and leaves lengths[b] as it was; its status and index go to status[b] (head 0 writes it).
__global__ void compact_kernel(CompactArgs a, int32_t* status) {  // status: [B, 2]
  const int64_t b = blockIdx.y, h = blockIdx.x;
  const int64_t* src_pos = a.src_pos + b * a.max_keep;  // [max_keep]
  const int32_t n_keep = a.n_keep[b];
  const int64_t dst_start = a.dst_start[b];
  __shared__ int32_t s_ok;
  if (threadIdx.x == 0) {
    const math::CompactCheck c = math::check_keep_list(src_pos, n_keep, dst_start, a.max_keep, a.max_seq);
    s_ok = c.status == math::kCompactOk;
    if (h == 0) {
      status[2 * b] = c.status, status[2 * b + 1] = c.bad_index;
      if (s_ok && a.lengths) a.lengths[b] = dst_start + n_keep;
    }
  }
  __syncthreads();
  if (!s_ok || h >= a.heads) return;
  const int64_t bh_base = (b * a.heads + h) * a.max_seq * a.head_dim;
  const int64_t n_elems = static_cast<int64_t>(n_keep) * a.head_dim;
  for (int64_t tile = 0; tile < n_elems; tile += kCompactThreads) {
    const int64_t e = tile + threadIdx.x;
    float v = 0.0f;
    math::CompactIndex ix{0, 0};
    if (e < n_elems) {
      ix = math::compact_index(src_pos, dst_start, bh_base, a.head_dim, e / a.head_dim, e % a.head_dim);
      v = a.kv[ix.src];
    }
    __syncthreads();
    if (e < n_elems) a.kv[ix.dst] = v;
    __syncthreads();
  }
}

// grid (blocks_x, B). A sequence whose index is out of range is left untouched; block x = 0
// writes its status (0 ok, 1 bad).
__global__ void reorder_kernel(float* dst, const float* src, const int64_t* indices, int64_t batch,
                               int64_t row_elems, int32_t* status) {  // status: [B]
  const int64_t b = blockIdx.y;
  const int64_t from = indices[b];
  const bool ok = from >= 0 && from < batch;
  if (blockIdx.x == 0 && threadIdx.x == 0) status[b] = ok ? 0 : 1;
  if (!ok) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < row_elems; e += stride)
    dst[b * row_elems + e] = src[from * row_elems + e];
}

}  // namespace

void kv_compact_cuda(const CompactArgs& a, const CudaLaunch& launch) {
  const char* who = "kv_compact_cuda";
  detail::check_compact_sizes(a, who);
  SD_CHECK(a.batch <= 65535 && a.heads <= INT32_MAX, who, ": batch = ", a.batch, ", heads = ", a.heads,
           " exceed the grid limits (65535, 2^31 - 1)");
  detail::check_workspace(launch, kv_compact_cuda_workspace_bytes(a), who);
  detail::require_device(who);
  if (a.batch == 0) return;
  const unsigned heads = static_cast<unsigned>(std::max<int64_t>(a.heads, 1));  // H = 0 still sets lengths
  compact_kernel<<<dim3(heads, static_cast<unsigned>(a.batch)), kCompactThreads, 0, detail::stream_of(launch)>>>(
      a, static_cast<int32_t*>(launch.workspace));
  detail::cuda_check(cudaGetLastError(), who, "launch of the compaction kernel");
}

void kv_reorder_cuda(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems,
                     const CudaLaunch& launch) {
  const char* who = "kv_reorder_cuda";
  detail::check_reorder_args(dst, src, indices, batch, row_elems, who);
  SD_CHECK(batch <= 65535, who, ": batch = ", batch, " exceeds the grid limit (65535)");
  SD_CHECK(batch == 0 || indices, who, ": indices [B] is null");
  detail::check_workspace(launch, kv_reorder_cuda_workspace_bytes(batch), who);
  detail::require_device(who);
  if (batch == 0) return;
  // row_elems = 0 still writes the statuses (one block per sequence).
  const unsigned blocks_x = static_cast<unsigned>(std::clamp<int64_t>((row_elems + 255) / 256, 1, 1024));
  reorder_kernel<<<dim3(blocks_x, static_cast<unsigned>(batch)), 256, 0, detail::stream_of(launch)>>>(
      dst, src, indices, batch, row_elems, static_cast<int32_t*>(launch.workspace));
  detail::cuda_check(cudaGetLastError(), who, "launch of the reorder kernel");
}

}  // namespace specdec::kernels
