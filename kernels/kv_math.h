#pragma once
// Per-sequence KV-cache compaction logic shared by kv_compact_cpu and the CUDA kernel.
//
// A layer tensor is [B, H, S, D]. Compaction of sequence b moves position src_pos[i] to
// dst_start + i for i < n_keep (token-tree acceptance keeps the accepted path; beam search
// reorders whole rows instead, see kv_reorder_*). Because src_pos is strictly ascending and
// >= dst_start, dst_start + i <= src_pos[i] < src_pos[j] for all j > i: copying in ascending
// i never overwrites a source that is still to be read. The CPU copies sequentially; the GPU
// copies tiles of ascending i, reading a whole tile before writing it.
#include <cstdint>

#include "kernels/sd_hd.h"

namespace specdec::kernels::math {

enum CompactStatus : int32_t {
  kCompactOk = 0,
  kBadNKeep = -1,       // n_keep[b] outside [0, max_keep]
  kBadDstStart = -2,    // dst_start[b] outside [0, max_seq - n_keep]
  kBadSrcPos = -3,      // src_pos[b][i] < dst_start, >= max_seq, or not strictly ascending
};

struct CompactCheck {
  int32_t status = kCompactOk;
  int32_t bad_index = -1;
};

SD_HD inline CompactCheck check_keep_list(const int64_t* src_pos,  // [n_keep]
                                          int32_t n_keep, int64_t dst_start, int64_t max_keep,
                                          int64_t max_seq) {
  CompactCheck c;
  if (n_keep < 0 || n_keep > max_keep) return {kBadNKeep, n_keep};
  if (dst_start < 0 || dst_start + n_keep > max_seq) return {kBadDstStart, -1};
  for (int32_t i = 0; i < n_keep; ++i) {
    const bool ascending = i == 0 || src_pos[i] > src_pos[i - 1];
    if (!ascending || src_pos[i] < dst_start || src_pos[i] >= max_seq) return {kBadSrcPos, i};
  }
  return c;
}

// Offsets (in floats) of element (kept index i, channel d) of head h of sequence b.
struct CompactIndex {
  int64_t src, dst;
};
SD_HD inline CompactIndex compact_index(const int64_t* src_pos,  // [n_keep] of sequence b
                                        int64_t dst_start, int64_t bh_base, int64_t head_dim,
                                        int64_t i, int64_t d) {
  return {bh_base + src_pos[i] * head_dim + d, bh_base + (dst_start + i) * head_dim + d};
}

// Sequential compaction of one (sequence, head) slab [S, D] (CPU).
SD_HD inline void compact_head(float* kv,           // [B, H, S, D] whole layer
                               const int64_t* src_pos,  // [n_keep]
                               int32_t n_keep, int64_t dst_start, int64_t bh_base,
                               int64_t head_dim) {
  for (int64_t i = 0; i < n_keep; ++i) {
    if (src_pos[i] == dst_start + i) continue;  // already in place
    for (int64_t d = 0; d < head_dim; ++d) {
      const CompactIndex ix = compact_index(src_pos, dst_start, bh_base, head_dim, i, d);
      kv[ix.dst] = kv[ix.src];
    }
  }
}

// O(1) rollback of one sequence: keep only the first new_length positions.
SD_HD inline int64_t rolled_back_length(int64_t length, int64_t new_length) {
  return new_length < length ? new_length : length;
}

}  // namespace specdec::kernels::math
