#pragma once
// Checks shared by the models and the loader: shape text for errors, and the input checks of
// every CausalLM::forward (shapes, start positions against the cache, token ids). Errors name the model ("llama forward", "gpt2 forward") and the bad value.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::model {

// "[2, 3]": shapes in error messages.
std::string shape_str(at::IntArrayRef shape);

// tokens: [B, T] integer ids; start_pos: [B]. `cache_heads` is the number of K/V heads the
// model stores; `max_positions` (> 0) bounds start + T, e.g. a learned position table.
// n_fed (ForwardOptions::n_fed, [B] in [0, T], or empty = T each): only the fed tokens are
// checked, and only start + n_fed[b] must fit the cache. check_ids false: the ids' range is
// left to the caller (ids on a device, checked there without a read).
void check_forward_inputs(const std::string& who, const ModelConfig& cfg, int64_t cache_heads,
                          int64_t max_positions, const at::Tensor& tokens,
                          const std::vector<int64_t>& start_pos, const KVCache& cache,
                          const std::vector<int64_t>& n_fed = {}, bool check_ids = true);

// Engines that compute every row of [B, T] refuse a ragged batch (ForwardOptions::n_fed with
// some n_fed[b] < T) and a tree per sequence (parents of B trees), naming the engine.
void refuse_ragged(const std::string& who, const at::Tensor& tokens, const ForwardOptions& options);

// Sequence b's tree (ForwardOptions::parents): its tree_cached + T entries, the same for every
// b when one tree serves the batch. Null for a chain.
const int32_t* tree_of(const ForwardOptions& options, int64_t b, int64_t T);

// ForwardOptions against the model and the fed tokens [B, T]: a tree (or one per sequence) of
// tree_cached + T parents each in [-1, t), B*T non-negative positions, ascending layer indices
// in [0, n_layers), hidden_layer in [-1, n_layers). Errors name the entry and list what is valid.
void check_forward_options(const std::string& who, const ModelConfig& cfg, const at::Tensor& tokens,
                           const std::vector<int64_t>& start_pos, const ForwardOptions& options);

// Options for an engine that builds its tree mask on the host: `options` itself, or, when it
// carries ForwardOptions::device_parents, a copy with them copied into `parents` (from a GPU,
// one host read, counted: core/host_reads.h; on the CPU, where the host engines run, a copy).
// `copy` holds that copy.
const ForwardOptions& read_device_parents(const ForwardOptions& options, ForwardOptions& copy);

// [B*T] position of each fed token: options.positions, else the visible prefix length
// start_pos[b] - tree_cached plus the token's depth in the tree (0 for a token that follows the
// prefix; a chain gives start_pos[b] + t).
std::vector<int64_t> fed_positions(const std::vector<int64_t>& start_pos, int64_t T,
                                   const ForwardOptions& options);

// For a tree of n nodes (parents[t] < t, -1 = follows the prefix): anc[begin[t] ..
// begin[t+1]) lists t's ancestors root first and t itself last, as node indices. Empty
// parents (a chain) give empty outputs.
void tree_ancestors(const std::vector<int32_t>& parents, std::vector<int64_t>& anc, std::vector<int64_t>& begin);
void tree_ancestors(const int32_t* parents, int64_t n, std::vector<int64_t>& anc, std::vector<int64_t>& begin);

// The same sets on a device, as a mask: parents [R, N] int64 (-1: the node follows the prefix;
// else an earlier node) -> [R, N, N] bool, row i marking node i and its ancestors; by pointer
// doubling, ceil(log2 N) gathers whatever the tree (so a captured step replays them for any
// tree of its size). The ATen engine's tree masks and the repetition penalty's draft paths.
at::Tensor ancestor_sets(const at::Tensor& parents);

// The layout of ForwardOptions::logits_last from full logits [B, T, V] (row t = fed token t):
// [B, k, V], row j of sequence b its fed token max(0, n_fed[b] - k) + j (n_fed empty: T each),
// zero rows past its last. Logits already [B, k, V] come back as they are.
at::Tensor last_logit_rows(const at::Tensor& logits, const std::vector<int64_t>& n_fed, int64_t k);

}  // namespace specdec::model
