// CPU KV-cache operations: rollback (a length change), compaction (tree acceptance) and
// beam reorder. Row logic is in kernels/kv_math.h, shared with kernels/cuda/kv_cuda.cu.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/kernels_internal.h"
#include "kernels/kernels.h"
#include "kernels/kv_math.h"

namespace specdec::kernels {

namespace {
// Below ~1 MB of copying, forking an OpenMP team costs more than it saves (and much more
// when the cores are oversubscribed).
constexpr int64_t kParallelMinFloats = int64_t{1} << 18;
}  // namespace

namespace detail {

void check_compact_sizes(const CompactArgs& a, const char* who) {
  SD_CHECK(a.batch >= 0 && a.heads >= 0 && a.max_seq >= 0 && a.head_dim >= 0 && a.max_keep >= 0, who,
           ": negative size (batch ", a.batch, ", heads ", a.heads, ", max_seq ", a.max_seq,
           ", head_dim ", a.head_dim, ", max_keep ", a.max_keep, ")");
  SD_CHECK(a.batch == 0 || (a.kv && a.n_keep && a.dst_start), who,
           ": kv [B, H, S, D], n_keep [B] and dst_start [B] must not be null");
  SD_CHECK(a.batch == 0 || a.max_keep == 0 || a.src_pos, who, ": src_pos [B, max_keep] is null");
}

void throw_compact_error(const char* who, int64_t b, int32_t status, int32_t i) {
  switch (status) {
    case math::kBadNKeep:
      fail(who, ": n_keep[", b, "] = ", i, " is outside [0, max_keep]");
    case math::kBadDstStart:
      fail(who, ": dst_start[", b, "] + n_keep[", b, "] is outside [0, max_seq]");
    case math::kBadSrcPos:
      fail(who, ": src_pos[", b, "][", i, "] is below dst_start, >= max_seq or not strictly ascending");
    default:
      fail(who, ": sequence ", b, " failed with status ", status);
  }
}

void check_reorder_args(const float* dst, const float* src, const int64_t* indices, int64_t batch,
                        int64_t row_elems, const char* who) {
  SD_CHECK(batch >= 0 && row_elems >= 0, who, ": batch = ", batch, ", row_elems = ", row_elems,
           " must be >= 0");
  if (batch == 0 || row_elems == 0) return;
  SD_CHECK(dst && src && indices, who, ": dst, src [B, row_elems] and indices [B] must not be null");
  const float* dst_end = dst + batch * row_elems;
  const float* src_end = src + batch * row_elems;
  SD_CHECK(dst_end <= src || src_end <= dst, who, ": dst and src overlap (reorder is out of place)");
}

}  // namespace detail

void check_compact_args(const CompactArgs& a, const char* who) {
  detail::check_compact_sizes(a, who);
  for (int64_t b = 0; b < a.batch; ++b) {
    const math::CompactCheck c =
        math::check_keep_list(a.src_pos + b * a.max_keep, a.n_keep[b], a.dst_start[b], a.max_keep, a.max_seq);
    if (c.status != math::kCompactOk) detail::throw_compact_error(who, b, c.status, c.bad_index);
  }
}

void check_compact_status(const int32_t* status, int64_t batch, const char* who) {
  SD_CHECK(batch >= 0, who, ": batch = ", batch, " must be >= 0");
  if (batch == 0) return;
  SD_CHECK(status, who, ": status [B, 2] is null");
  for (int64_t b = 0; b < batch; ++b)
    if (status[2 * b] != math::kCompactOk) detail::throw_compact_error(who, b, status[2 * b], status[2 * b + 1]);
}

void check_reorder_status(const int32_t* status, int64_t batch, const char* who) {
  SD_CHECK(batch >= 0, who, ": batch = ", batch, " must be >= 0");
  if (batch == 0) return;
  SD_CHECK(status, who, ": status [B] is null");
  for (int64_t b = 0; b < batch; ++b)
    SD_CHECK(status[b] == 0, who, ": indices[", b, "] is outside [0, ", batch, ")");
}

void kv_compact_cpu(const CompactArgs& a) {
  // Validate everything first so that a bad sequence leaves the cache untouched.
  check_compact_args(a, "kv_compact_cpu");
  const int64_t n_slabs = a.batch * a.heads;
  int64_t n_moved = 0;  // floats copied; a parallel region costs more than a small copy
  for (int64_t b = 0; b < a.batch; ++b) n_moved += int64_t{a.n_keep[b]} * a.heads * a.head_dim;
  const bool split = n_slabs > 1 && n_moved >= kParallelMinFloats;
  parallel::parallel_for(n_slabs, split ? 1 : n_slabs, [&](int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / a.heads;
      math::compact_head(a.kv, a.src_pos + b * a.max_keep, a.n_keep[b], a.dst_start[b],
                         bh * a.max_seq * a.head_dim, a.head_dim);
    }
  });
  if (a.lengths)
    for (int64_t b = 0; b < a.batch; ++b) a.lengths[b] = a.dst_start[b] + a.n_keep[b];
}

void kv_reorder_cpu(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems) {
  detail::check_reorder_args(dst, src, indices, batch, row_elems, "kv_reorder_cpu");
  if (batch == 0 || row_elems == 0) return;
  for (int64_t b = 0; b < batch; ++b)
    SD_CHECK(indices[b] >= 0 && indices[b] < batch, "kv_reorder_cpu: indices[", b, "] = ", indices[b],
             " is outside [0, ", batch, ")");
  const bool split = batch > 1 && batch * row_elems >= kParallelMinFloats;
  parallel::parallel_for(batch, split ? 1 : batch, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      std::memcpy(dst + b * row_elems, src + indices[b] * row_elems,
                  sizeof(float) * static_cast<size_t>(row_elems));
  });
}

void kv_rollback(int64_t* lengths, const int64_t* new_lengths, int64_t batch) {
  SD_CHECK(batch >= 0, "kv_rollback: batch = ", batch, " must be >= 0");
  if (batch == 0) return;
  SD_CHECK(lengths && new_lengths, "kv_rollback: lengths [B] / new_lengths [B] are null");
  for (int64_t b = 0; b < batch; ++b)
    SD_CHECK(new_lengths[b] >= 0, "kv_rollback: new_lengths[", b, "] = ", new_lengths[b], " is negative");
  // O(1) per sequence: positions past the length are dead and get overwritten by the next
  // forward, so no KV data moves.
  for (int64_t b = 0; b < batch; ++b) lengths[b] = math::rolled_back_length(lengths[b], new_lengths[b]);
}

}  // namespace specdec::kernels
