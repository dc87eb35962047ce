// CUDA KV-cache compaction and beam reorder. Shared logic: kernels/kv_math.h.
#include <algorithm>
#include <vector>

#include "kernels/cpu/kernels_internal.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/kernels.h"
#include "kernels/kv_math.h"

namespace specdec::kernels {

namespace {

constexpr int kCompactThreads = 256;

// One block per (sequence, head) slab, grid (H, B). Threads walk the flattened (i, d)
// elements in tiles of ascending i; each tile is read completely before it is written, which
// together with dst_start + i <= src_pos[i] < src_pos[j > i] makes the in-place move safe.
__global__ void compact_kernel(CompactArgs a, int32_t* status) {  // status: [B, 2]
  const int64_t b = blockIdx.y, h = blockIdx.x;
  const int64_t* src_pos = a.src_pos + b * a.max_keep;  // [max_keep]
  const int32_t n_keep = a.n_keep[b];
  const int64_t dst_start = a.dst_start[b];
  __shared__ int32_t s_ok;
  if (threadIdx.x == 0) {
    const math::CompactCheck c = math::check_keep_list(src_pos, n_keep, dst_start, a.max_keep, a.max_seq);
    s_ok = c.status == math::kCompactOk;
    if (h == 0) status[2 * b] = c.status, status[2 * b + 1] = c.bad_index;
  }
  __syncthreads();
  if (!s_ok) return;
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

__global__ void set_lengths_kernel(CompactArgs a) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b < a.batch) a.lengths[b] = a.dst_start[b] + a.n_keep[b];
}

__global__ void reorder_kernel(float* dst, const float* src, const int64_t* indices, int64_t batch,
                               int64_t row_elems, int32_t* bad) {
  const int64_t b = blockIdx.y;
  const int64_t from = indices[b];
  if (from < 0 || from >= batch) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *bad = static_cast<int32_t>(b) + 1;
    return;
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < row_elems; e += stride)
    dst[b * row_elems + e] = src[from * row_elems + e];
}

}  // namespace

void kv_compact_cuda(const CompactArgs& a) {
  const char* who = "kv_compact_cuda";
  detail::check_compact_args(a, who);
  detail::require_device(who);
  if (a.batch == 0 || a.heads == 0) return;
  int32_t* status = nullptr;  // [B, 2] per-sequence status and offending index
  detail::cuda_check(cudaMalloc(&status, sizeof(int32_t) * 2 * a.batch), who, "cudaMalloc");
  compact_kernel<<<dim3(static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch)), kCompactThreads>>>(a, status);
  cudaError_t err = cudaGetLastError();
  std::vector<int32_t> host(static_cast<size_t>(2 * a.batch));
  if (err == cudaSuccess)
    err = cudaMemcpy(host.data(), status, sizeof(int32_t) * host.size(), cudaMemcpyDeviceToHost);
  cudaFree(status);
  detail::cuda_check(err, who, "compaction kernel");
  for (int64_t b = 0; b < a.batch; ++b)
    if (host[2 * b] != math::kCompactOk) detail::throw_compact_error(who, b, host[2 * b], host[2 * b + 1]);
  if (a.lengths) {
    set_lengths_kernel<<<static_cast<unsigned>((a.batch + 255) / 256), 256>>>(a);
    detail::cuda_check(cudaDeviceSynchronize(), who, "length update");
  }
}

void kv_reorder_cuda(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems) {
  const char* who = "kv_reorder_cuda";
  detail::check_reorder_args(dst, src, indices, batch, row_elems, who);
  detail::require_device(who);
  if (batch == 0 || row_elems == 0) return;
  int32_t* bad = nullptr;  // 0, or 1 + the first sequence with an out-of-range index
  detail::cuda_check(cudaMalloc(&bad, sizeof(int32_t)), who, "cudaMalloc");
  cudaError_t err = cudaMemset(bad, 0, sizeof(int32_t));
  const unsigned blocks_x = static_cast<unsigned>(std::min<int64_t>((row_elems + 255) / 256, 1024));
  if (err == cudaSuccess) {
    reorder_kernel<<<dim3(blocks_x, static_cast<unsigned>(batch)), 256>>>(dst, src, indices, batch, row_elems, bad);
    err = cudaGetLastError();
  }
  int32_t host_bad = 0;
  if (err == cudaSuccess) err = cudaMemcpy(&host_bad, bad, sizeof(int32_t), cudaMemcpyDeviceToHost);
  cudaFree(bad);
  detail::cuda_check(err, who, "reorder kernel");
  SD_CHECK(host_bad == 0, who, ": indices[", host_bad - 1, "] is outside [0, ", batch, ")");
}

}  // namespace specdec::kernels
