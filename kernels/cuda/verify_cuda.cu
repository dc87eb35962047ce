// CUDA verification in two kernels on the caller's stream, with no allocation or
// synchronisation:
//   1. verify_rows_kernel, a grid over (sequence b, row j <= n_draft[b]), one block of
//      math::kLanes threads each: the row work that does not depend on the draft walk.
//      greedy: argmax p_j; tokens_only: the sample y_j ~ p_j; sampling and block: the lane
//      masses of the row's sampling weights (max(0, w_j p_j - q_j) for j < n_draft, with
//      w_j = 1 in sampling mode and block verification's weight in block mode; p_j for the
//      bonus row j = n_draft). Results go to the workspace (detail::VerifyWorkspace).
//   2. verify_walk_kernel, one block per sequence: math::verify_row, the CPU's row logic,
//      with CachedRowOps answering from the workspace. What is left per sequence is O(gamma)
//      scalar work, the inverse CDF over the kLanes precomputed lane masses and the scan of
//      one lane (V / kLanes elements): the same lane masses, lane pick and token as the CPU.
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/kernels_internal.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/row_ops_gpu.cuh"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace specdec::kernels {

namespace {

// Device view of the workspace sections of one launch.
struct RowCache {
  int32_t* token;  // [B, R] or nullptr
  double* weight;  // [B, R] or nullptr
  double* mass;    // [B, R, kLanes] or nullptr
};

RowCache row_cache(const detail::VerifyWorkspace& w, void* base) {
  char* p = static_cast<char*>(base);
  RowCache c;
  c.token = w.weight > w.token ? reinterpret_cast<int32_t*>(p + w.token) : nullptr;
  c.weight = w.mass > w.weight ? reinterpret_cast<double*>(p + w.weight) : nullptr;
  c.mass = w.bytes > w.mass ? reinterpret_cast<double*>(p + w.mass) : nullptr;
  return c;
}

__device__ bool row_is_valid(const math::RowView& r) { return math::check_row(r).status == math::kRowOk; }

// grid (B, gamma+1), block kLanes.
__global__ void verify_rows_kernel(VerifyArgs args, RowCache cache) {
  __shared__ gpu::RowOpsShared shared;
  gpu::GpuRowOps ops(shared);
  const int64_t b = blockIdx.x, j = blockIdx.y, R = args.gamma + 1, V = args.vocab;
  const math::RowView r = math::row_view(args, b);
  // Bad input: the walk kernel reports it and reads nothing from the cache. The check reads
  // O(gamma) scalars (the same addresses in every thread) and keeps the indexing below in
  // bounds. Both conditions are uniform over the block, so the collectives stay in step.
  if (!row_is_valid(r) || j > r.n_draft) return;
  const float* p_j = r.p + j * V;  // [V]
  const int64_t slot = b * R + j;
  if (r.mode == VerifyMode::greedy || r.mode == VerifyMode::tokens_only) {
    const int64_t t = r.mode == VerifyMode::greedy
                          ? ops.argmax(p_j, V)
                          : ops.sample(p_j, nullptr, V, j < r.n_draft ? r.u[j] : r.u[r.gamma], 1.0);
    if (threadIdx.x == 0) cache.token[slot] = static_cast<int32_t>(t);
    return;
  }
  const bool residual = j < r.n_draft;
  const double w = (residual && r.mode == VerifyMode::block) ? math::block_weight(r, static_cast<int32_t>(j)) : 1.0;
  const float* q_j = residual ? r.q + j * V : nullptr;
  cache.mass[slot * math::kLanes + threadIdx.x] = math::lane_mass(p_j, q_j, V, threadIdx.x, w);
  if (threadIdx.x == 0) cache.weight[slot] = w;
}

// The Ops of verify_row for one sequence, answering from the row cache when the request is
// the one verify_rows_kernel precomputed (same row, same q, same scale, same uniform), else
// computing it block-parallel like GpuRowOps (sampling mode's fallback to p when the
// residual is empty). Every method is a block collective.
struct CachedRowOps {
  gpu::RowOpsShared& sh;
  gpu::GpuRowOps fresh;
  math::RowView r;
  const int32_t* token;  // [R] of this sequence or nullptr
  const double* weight;  // [R] or nullptr
  const double* masses;  // [R, kLanes] or nullptr

  __device__ CachedRowOps(gpu::RowOpsShared& shared, const math::RowView& row, const RowCache& c, int64_t b)
      : sh(shared), fresh(shared), r(row) {
    const int64_t R = row.gamma + 1;
    token = c.token ? c.token + b * R : nullptr;
    weight = c.weight ? c.weight + b * R : nullptr;
    masses = c.mass ? c.mass + b * R * math::kLanes : nullptr;
  }

  // Row index j of a p row of this sequence (0..n_draft), or -1.
  __device__ int64_t row_of(const float* p) const {
    const int64_t d = p - r.p;
    if (d < 0 || d % r.n_vocab != 0) return -1;
    const int64_t j = d / r.n_vocab;
    return j <= r.n_draft ? j : -1;
  }

  __device__ int64_t argmax(const float* row, int64_t n_vocab) {
    const int64_t j = row_of(row);
    if (token && r.mode == VerifyMode::greedy && j >= 0) return token[j];
    return fresh.argmax(row, n_vocab);
  }

  template <class T>
  __device__ int64_t sample(const T* p, const float* q, int64_t n_vocab, double u, double p_scale = 1.0) {
    if constexpr (std::is_same<T, float>::value) {
      const int64_t j = row_of(p);
      if (j >= 0 && token && r.mode == VerifyMode::tokens_only && !q &&
          u == (j < r.n_draft ? r.u[j] : r.u[r.gamma]))
        return token[j];
      if (j >= 0 && masses && cached_weights(j, q, p_scale)) {
        if (threadIdx.x == 0) {
          // Serial over kLanes values, in the CPU's order, so the pick is bit-identical.
          const math::LanePick pick = math::pick_lane(masses + j * math::kLanes, u);
          sh.token = pick.lane < 0 ? -1 : math::scan_lane(p, q, n_vocab, pick.lane, pick.remaining, p_scale);
        }
        __syncthreads();
        const int64_t t = sh.token;
        __syncthreads();
        return t;
      }
    }
    return fresh.sample(p, q, n_vocab, u, p_scale);
  }

  template <class T>
  __device__ double mass(const T* p, const float* q, int64_t n_vocab, double p_scale) {
    if constexpr (std::is_same<T, float>::value) {
      const int64_t j = row_of(p);
      if (j >= 0 && masses && cached_weights(j, q, p_scale)) {
        if (threadIdx.x == 0) sh.total = math::lane_total(masses + j * math::kLanes);
        __syncthreads();
        const double total = sh.total;
        __syncthreads();
        return total;
      }
    }
    return fresh.mass(p, q, n_vocab, p_scale);
  }

 private:
  // Row j's cache holds the weights max(0, weight[j] p_j - q_j) for j < n_draft and p_j for
  // j = n_draft (where the scale is not applied).
  __device__ bool cached_weights(int64_t j, const float* q, double p_scale) const {
    if (j < r.n_draft) return q == r.q + j * r.n_vocab && p_scale == weight[j];
    return q == nullptr;
  }
};

// One block of kLanes threads per sequence.
__global__ void verify_walk_kernel(VerifyArgs args, RowCache cache) {
  __shared__ gpu::RowOpsShared shared;
  const int64_t b = blockIdx.x;
  const math::RowView row = math::row_view(args, b);
  CachedRowOps ops(shared, row, cache, b);
  const math::RowResult res = math::verify_row(row, ops);
  if (threadIdx.x == 0) {
    // A negative count carries the row status to check_verify_status, out[0] the entry.
    args.n_accepted[b] = res.status == math::kRowOk ? res.n_accepted : res.status;
    int32_t* out = args.out_tokens + b * (args.gamma + 1);
    math::write_row_output(row, res, out);
  }
}

// grid rows, block kLanes: PickArgs, one row per block (GpuRowOps: the CPU's tokens).
__global__ void pick_kernel(PickArgs args) {
  __shared__ gpu::RowOpsShared shared;
  gpu::GpuRowOps ops(shared);
  const int64_t r = blockIdx.x;
  const float* row = args.scores + r * args.vocab;  // [V]
  const int64_t token =
      args.uniforms ? ops.sample(row, nullptr, args.vocab, args.uniforms[r]) : ops.argmax(row, args.vocab);
  if (threadIdx.x == 0) args.out_tokens[r] = token;
}

}  // namespace

void pick_cuda(const PickArgs& args, const CudaLaunch& launch) {
  const char* who = "pick_cuda";
  detail::check_pick_args(args, who);
  SD_CHECK(args.rows <= INT32_MAX, who, ": rows = ", args.rows, " exceeds the grid limit (2^31 - 1)");
  detail::require_device(who);
  if (args.rows == 0) return;
  pick_kernel<<<static_cast<unsigned>(args.rows), math::kLanes, 0, detail::stream_of(launch)>>>(args);
  detail::cuda_check(cudaGetLastError(), who, "launch");
}

void verify_cuda(const VerifyArgs& args, const CudaLaunch& launch) {
  const char* who = "verify_cuda";
  const detail::VerifyWorkspace layout = detail::verify_workspace_layout(args, who);  // checks args
  SD_CHECK(args.gamma + 1 <= 65535, who, ": gamma = ", args.gamma, " exceeds the grid limit (65534)");
  SD_CHECK(args.batch <= INT32_MAX, who, ": batch = ", args.batch, " exceeds the grid limit (2^31 - 1)");
  detail::check_workspace(launch, layout.bytes, who);
  detail::require_device(who);
  if (args.batch == 0) return;
  const RowCache cache = row_cache(layout, launch.workspace);
  const cudaStream_t stream = detail::stream_of(launch);
  verify_rows_kernel<<<dim3(static_cast<unsigned>(args.batch), static_cast<unsigned>(args.gamma + 1)), math::kLanes,
                       0, stream>>>(args, cache);
  detail::cuda_check(cudaGetLastError(), who, "launch of the per-row kernel");
  verify_walk_kernel<<<static_cast<unsigned>(args.batch), math::kLanes, 0, stream>>>(args, cache);
  detail::cuda_check(cudaGetLastError(), who, "launch of the per-sequence kernel");
}

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace specdec::kernels
