#pragma once
// Verification and KV-cache kernels: plain launchers on raw pointers, no CUDA or
// LibTorch headers. Each op has a CPU implementation (parallel over the batch) and a
// CUDA kernel; both call the per-row logic in kernels/*_math.h (SD_HD inline), so the
// CPU tests exercise the code the GPU runs.
//
// Notation (Leviathan et al. 2023; Chen et al. 2023): p = target, q = draft.
// Shapes are row-major and contiguous; "in" marks inputs, "out" outputs.
// Row logic: kernels/verify_math.h, kernels/tree_math.h, kernels/kv_math.h.
// Overview: kernels/README.md.
#include <cstddef>
#include <cstdint>

namespace specdec::kernels {

// Where a CUDA op runs: a stream (a cudaStream_t passed as void*; nullptr = the legacy default
// stream, which is LibTorch's default stream) and device scratch memory owned by the caller,
// at least the bytes the op's *_workspace_bytes() asks for and 16-byte aligned (cudaMalloc
// and the caching allocators give 256). Launches are asynchronous: no cudaMalloc, cudaFree,
// synchronous cudaMemcpy or device/stream synchronisation inside; the launcher returns once
// the kernels are queued. Launch errors (cudaGetLastError) and argument errors throw
// specdec::Error at once; errors in the data (a token outside [0, V), ...) come back through
// the outputs or a status in the workspace, for the caller to check with the check_*_status
// helpers below after its own synchronisation.
struct CudaLaunch {
  void* stream = nullptr;      // cudaStream_t
  void* workspace = nullptr;   // device memory, >= workspace_bytes
  size_t workspace_bytes = 0;  // size of workspace
};

enum class VerifyMode {
  greedy,       // accept while draft token == argmax p; emit argmax p at the first mismatch
                // (ties -> lowest token id, like torch.argmax; NaN ranks as -inf)
  sampling,     // lossless speculative sampling: accept x_i with prob min(1, p/q); at the first
                // rejection emit a sample of norm(max(0, p - q)); after full acceptance a bonus
                // sample of p[n_draft] (= p[gamma] for a full draft)
  tokens_only,  // draft without q (n-gram / prompt lookup): y_i ~ p_i; accept while y_i == x_i;
                // the first differing y_i is emitted; bonus sample of p[n_draft] after all accepted
  block,        // block verification (Sun et al., ICLR 2025): the draft is judged jointly; same
                // inputs as sampling, lossless, and its expected accepted length is never below
                // sampling's. Chains only (verify_*); row logic in verify_math.h
};

// "greedy", "sampling", "tokens_only", "block" (messages, stats).
const char* mode_name(VerifyMode mode);

struct VerifyArgs {
  int64_t batch = 1;               // B
  int64_t gamma = 0;               // max draft length
  int64_t vocab = 0;               // V
  VerifyMode mode = VerifyMode::greedy;
  const int32_t* draft_tokens = nullptr;  // [B, gamma]   x_i (entries >= n_draft[b] ignored)
  bool draft_tokens_on_device = false;    // Backend::verify only: draft_tokens is in the device's
                                          // memory (a chain drawn there, unread), not the host's
  const int32_t* n_draft = nullptr;       // [B]          ragged draft lengths, 0..gamma
  const float* q = nullptr;               // [B, gamma, V] draft probs (sampling and block modes)
  const float* p = nullptr;               // [B, gamma+1, V] target probs (rows sum to 1)
  const double* uniforms = nullptr;       // [B, gamma+1] in [0,1] (53-bit uniforms, as the
                                          // plain sampler draws; 1 is tolerated): u[i] decides
                                          // position i; u[gamma] drives the final sample
                                          // (residual or bonus: sampling, block, tokens_only);
                                          // tokens_only uses u[i] to sample y_i. Not read in
                                          // greedy mode (may be null there).
  // The bonus token comes from row p[b][n_draft[b]] (the row after the last draft token),
  // so ragged drafts need no padding of p. Sampling is an inverse CDF over a fixed token
  // order, computed in double from the float inputs, identical on CPU and GPU.
  // outputs
  int32_t* n_accepted = nullptr;   // [B] out: accepted draft tokens a (0..n_draft[b]); a
                                   // row with bad input gets a negative status instead and
                                   // the entry's index in out_tokens[b][0] (rest -1), on CPU
                                   // and CUDA alike; check_verify_status names it (the CPU
                                   // call also throws specdec::Error at once)
  int32_t* out_tokens = nullptr;   // [B, gamma+1] out: x_0..x_{a-1}, then the resampled/bonus
                                   // token at index a; entries after a are set to -1
};

// CPU: parallel over the batch (OpenMP, when the batch is large enough to pay for it).
// Pointers are host memory. Throws specdec::Error for bad sizes/pointers, n_draft outside
// [0, gamma], a draft token outside [0, V), a uniform outside [0, 1] or NaN, or a p row
// (or all-zero residual fallback) without positive mass.
void verify_cpu(const VerifyArgs& args);
// CUDA: all pointers are device memory. Two kernels on launch.stream: a grid over
// (sequence, position) does each position's row work (argmax, the tokens_only sample, or the
// lane masses of the residual max(0, w p - q) and of the bonus row), then one block per
// sequence walks the draft and samples from the precomputed masses. Same tokens as verify_cpu.
// A row with bad input gets n_accepted[b] < 0 and the offending index in out_tokens[b][0]:
// check_verify_status() on the copied-back outputs names it. Throws specdec::Error at once
// for bad sizes/pointers, a workspace below verify_cuda_workspace_bytes(), a launch failure,
// a build without CUDA or no device.
size_t verify_cuda_workspace_bytes(const VerifyArgs& args);
void verify_cuda(const VerifyArgs& args, const CudaLaunch& launch);

// Token-tree verification: one draft tree per sequence, nodes in topological order.
// Node i of sequence b has token tokens[b][i] and parent parents[b][i] (< i; -1: a child of
// the root, which is the last committed token). p row 0 is the target distribution after the
// root, row i+1 the one after node i; q row i is the distribution node i was drawn from.
// From the root, each step moves to an accepted child (children are tried in node order) or
// emits the final token; at a leaf the final token is a bonus sample (argmax) of its row.
//   greedy:      follow the first child whose token is argmax p (ties -> lowest id), else
//                emit that argmax.
//   tokens_only: y ~ p (uniform u[row] at a row with children, u[N] at a leaf); follow the
//                first child with token y, else emit y. Lossless for any tree.
//   sampling:    multi-step speculative sampling (SpecInfer, Miao et al. 2024; the multi-draft
//                setting of SpecTr, Sun et al. 2023): a running residual r starts as p; child c
//                (token x, draft row q_c, uniform u[c]) is accepted with probability
//                min(1, r(x) / q_c(x)), else r <- norm(max(0, r - q_c)) and the next child is
//                tried; with all children rejected the final token ~ r (uniform u[N]).
//                Lossless when siblings are independent draws from their q rows (with
//                replacement, duplicates allowed), or when each node's row is its law given
//                the siblings drawn before it (drafters.h: the drafter contract).
//   block:       not defined for trees (an error).
// A chain (parents[i] = i - 1) gives exactly verify_*'s output in every shared mode.
// Row logic: kernels/tree_math.h.
struct TreeVerifyArgs {
  int64_t batch = 1;           // B
  int64_t max_nodes = 0;       // N
  int64_t vocab = 0;           // V
  VerifyMode mode = VerifyMode::greedy;
  const int32_t* tokens = nullptr;   // [B, N] node tokens (entries >= n_nodes[b] ignored)
  bool tokens_on_device = false;     // Backend::verify_tree only: tokens is in the device's
                                     // memory (a static tree drawn there, unread), not the host's
  const int32_t* parents = nullptr;  // [B, N] parent node, -1 (root) .. i-1
  bool parents_on_device = false;    // Backend::verify_tree only: parents is in the device's
                                     // memory (a tree grown there, unread), not the host's
  const int32_t* n_nodes = nullptr;  // [B] ragged node counts, 0..N
  const float* q = nullptr;          // [B, N, V] draft probs of each node (sampling mode only)
  const float* p = nullptr;          // [B, N+1, V] target probs: row 0 root, row i+1 node i
  const double* uniforms = nullptr;  // [B, N+1] in [0, 1]; not read in greedy mode (may be null)
  double* scratch = nullptr;         // [B, V] sampling mode: the running residual (caller-owned,
                                     // so no allocation happens inside; contents on return are
                                     // undefined)
  // outputs
  int32_t* n_accepted = nullptr;     // [B] out: accepted path length a (0..depth); a row with
                                     // bad input gets a negative status and the call throws
                                     // specdec::Error naming the entry
  int32_t* path = nullptr;           // [B, N] out: accepted node indices, root first, then -1
  int32_t* out_tokens = nullptr;     // [B, N+1] out: tokens of the path, the final token, -1...
};

// CPU: parallel over the batch. Host pointers. Throws specdec::Error for bad sizes/pointers,
// n_nodes outside [0, N], a parent outside [-1, i), a token outside [0, V), a uniform
// outside [0, 1] or NaN, or a row without positive mass to sample.
void verify_tree_cpu(const TreeVerifyArgs& args);
// CUDA: all pointers device memory (scratch too); one block per sequence. Sampling mode with
// args.scratch null takes the [B, V] doubles of running residual from the workspace, which
// verify_tree_cuda_workspace_bytes() then includes (0 otherwise). Bad input: as verify_cuda,
// read back with check_tree_status().
size_t verify_tree_cuda_workspace_bytes(const TreeVerifyArgs& args);
void verify_tree_cuda(const TreeVerifyArgs& args, const CudaLaunch& launch);

// KV-cache compaction for one layer tensor laid out [B, H, S, D] (float32), in place.
// For each sequence b, positions src_pos[b][0..n_keep[b]) (strictly ascending, each in
// [dst_start[b], S)) are copied to dst_start[b] + i, for all heads. Used by tree acceptance;
// rollback itself is just a length change (kv_rollback). Bad input throws specdec::Error
// naming the entry, before anything is moved (CPU). CUDA: all pointers device memory.
struct CompactArgs {
  float* kv = nullptr;                // [B, H, S, D] in/out
  int64_t batch = 1, heads = 0, max_seq = 0, head_dim = 0;
  const int64_t* src_pos = nullptr;   // [B, max_keep] in (entries >= n_keep[b] ignored)
  const int32_t* n_keep = nullptr;    // [B] in, 0..max_keep
  const int64_t* dst_start = nullptr; // [B] in, first destination slot
  int64_t max_keep = 0;
  int64_t* lengths = nullptr;         // [B] out, optional: set to dst_start[b] + n_keep[b]
};
void kv_compact_cpu(const CompactArgs& args);
// CUDA: all pointers device memory. The caller validates the keep lists on the host with
// check_compact_args() before copying them; the kernel checks them again and leaves a bad
// sequence (and its length) untouched, with its status in the workspace ([B, 2] int32:
// status, index; kv_compact_cuda_workspace_bytes()), which check_compact_status() reads
// from a host copy.
size_t kv_compact_cuda_workspace_bytes(const CompactArgs& args);
void kv_compact_cuda(const CompactArgs& args, const CudaLaunch& launch);
// Host-side validation of CompactArgs whose arrays (src_pos, n_keep, dst_start) are host
// memory: sizes, pointers and every keep list; throws specdec::Error naming the entry.
// kv_compact_cpu uses it too.
void check_compact_args(const CompactArgs& host_args, const char* who);
// status: a host copy of kv_compact_cuda's workspace, [B, 2] int32.
void check_compact_status(const int32_t* status, int64_t batch, const char* who);

// Beam reorder: dst[b] = src[indices[b]] for rows of row_elems floats (one layer's
// [B, H, S, D] tensor has row_elems = H * S * D). dst [B, row_elems] out, src
// [B, row_elems] in, indices [B] in (each in [0, B)); dst and src must not overlap.
void kv_reorder_cpu(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems);
// CUDA: device pointers. A sequence whose index is out of range is left untouched and
// flagged in the workspace ([B] int32, 1 = bad; kv_reorder_cuda_workspace_bytes()), which
// check_reorder_status() reads from a host copy.
size_t kv_reorder_cuda_workspace_bytes(int64_t batch);
void kv_reorder_cuda(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems,
                     const CudaLaunch& launch);
void check_reorder_status(const int32_t* status, int64_t batch, const char* who);

// Host side, after the caller copied the outputs back (its own synchronisation): throws
// specdec::Error naming the sequence and entry of the first row whose kernel reported bad
// input (n_accepted[b] < 0, offending index in out_tokens[b * out_stride]), with the CPU
// path's messages (the CPU launchers throw them directly and leave a bad row all -1).
void check_verify_status(const int32_t* n_accepted, const int32_t* out_tokens, int64_t batch, int64_t out_stride,
                         const char* who);
void check_tree_status(const int32_t* n_accepted, const int32_t* out_tokens, int64_t batch, int64_t out_stride,
                       const char* who);

// Token choice on the device (a draft loop's next token): one token per row of `scores`, the
// argmax (greedy; math::argmax_row's rules: ties -> lowest id, NaN ranks as -inf) or, given a
// uniform, a draw from the row by the lanes' inverse CDF (CpuRowOps / GpuRowOps::sample: the
// draw the verification kernels make, the same token on the CPU and the GPU for the same
// uniform). The tokens stay where the scores are, so a loop can feed them to its next forward
// without reading them.
struct PickArgs {
  int64_t rows = 0, vocab = 0;
  const float* scores = nullptr;     // [rows, V] in: logits (argmax) or probabilities (draws)
  const double* uniforms = nullptr;  // [rows] in, each in [0, 1); nullptr: argmax
  int64_t* out_tokens = nullptr;     // [rows] out: the token; -1 where a drawn row has no mass
                                     // (no positive entry, or NaN), for the caller to report
};
void pick_cpu(const PickArgs& args);
// CUDA: all pointers device memory; queued on launch.stream (no workspace), no synchronisation.
void pick_cuda(const PickArgs& args, const CudaLaunch& launch);

// O(1) rollback: lengths[b] = min(lengths[b], new_lengths[b]). lengths [B] in/out,
// new_lengths [B] in (>= 0). Host memory; no KV data moves.
void kv_rollback(int64_t* lengths, const int64_t* new_lengths, int64_t batch);

// True when this build has CUDA and a device is present.
bool cuda_available();

}  // namespace specdec::kernels
