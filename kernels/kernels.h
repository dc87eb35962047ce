#pragma once
// Verification and KV-cache kernels: plain launchers on raw pointers, no CUDA or
// LibTorch headers. Each op has a CPU implementation (parallel over the batch) and a
// CUDA kernel; both call the per-row logic in kernels/*_math.h (SD_HD inline), so the
// CPU tests exercise the code the GPU runs.
//
// Notation (Leviathan et al. 2023; Chen et al. 2023): p = target, q = draft.
#include <cstdint>

namespace specdec::kernels {

enum class VerifyMode {
  greedy,       // accept while draft token == argmax p; emit argmax p at the first mismatch
  sampling,     // lossless speculative sampling: accept x_i with prob min(1, p/q); at the first
                // rejection emit a sample of norm(max(0, p - q)); after full acceptance a bonus
                // sample of p[gamma]
  tokens_only,  // draft without q (n-gram / prompt lookup): y_i ~ p_i; accept while y_i == x_i;
                // the first differing y_i is emitted; bonus sample of p[gamma] after all accepted
};

struct VerifyArgs {
  int64_t batch = 1;               // B
  int64_t gamma = 0;               // max draft length
  int64_t vocab = 0;               // V
  VerifyMode mode = VerifyMode::greedy;
  const int32_t* draft_tokens = nullptr;  // [B, gamma]   x_i (entries >= n_draft[b] ignored)
  const int32_t* n_draft = nullptr;       // [B]          ragged draft lengths, 0..gamma
  const float* q = nullptr;               // [B, gamma, V] draft probs (sampling mode only)
  const float* p = nullptr;               // [B, gamma+1, V] target probs (rows sum to 1)
  const float* uniforms = nullptr;        // [B, gamma+1] in [0,1): u[i] (i < gamma) decides
                                          // position i; u[gamma] drives the final sample
                                          // (sampling mode); tokens_only uses u[i] to sample y_i
  // outputs
  int32_t* n_accepted = nullptr;   // [B] accepted draft tokens a (0..n_draft[b])
  int32_t* out_tokens = nullptr;   // [B, gamma+1] x_0..x_{a-1}, then the resampled/bonus
                                   // token at index a; entries after a are set to -1
};

// CPU: parallel over the batch. Pointers are host memory.
void verify_cpu(const VerifyArgs& args);
// CUDA: all pointers are device memory; one block per sequence. Throws specdec::Error
// when built without CUDA or when no device is present.
void verify_cuda(const VerifyArgs& args);

// KV-cache compaction for one layer tensor laid out [B, H, S, D] (float32).
// For each sequence b, positions src_pos[b][0..n_keep[b]) (ascending, each >= dst_start[b])
// are copied to dst_start[b] + i, for all heads. Used by tree acceptance; rollback itself is
// just a length change (kv_rollback).
struct CompactArgs {
  float* kv = nullptr;                // [B, H, S, D]
  int64_t batch = 1, heads = 0, max_seq = 0, head_dim = 0;
  const int64_t* src_pos = nullptr;   // [B, max_keep]
  const int32_t* n_keep = nullptr;    // [B]
  const int64_t* dst_start = nullptr; // [B]
  int64_t max_keep = 0;
  int64_t* lengths = nullptr;         // [B] optional: set to dst_start[b] + n_keep[b]
};
void kv_compact_cpu(const CompactArgs& args);
void kv_compact_cuda(const CompactArgs& args);

// Beam reorder: dst[b] = src[indices[b]] for rows of row_elems floats (one layer's
// [B, H, S, D] tensor has row_elems = H * S * D). dst and src must not alias.
void kv_reorder_cpu(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems);
void kv_reorder_cuda(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems);

// O(1) rollback: lengths[b] = min(lengths[b], new_lengths[b]).
void kv_rollback(int64_t* lengths, const int64_t* new_lengths, int64_t batch);

// True when this build has CUDA and a device is present.
bool cuda_available();

}  // namespace specdec::kernels
