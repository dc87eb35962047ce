#pragma once
// Per-sequence token-tree verification shared by verify_tree_cpu and the CUDA kernel
// (DESIGN principles 8 and 12: a chain is a tree). Contract and modes: TreeVerifyArgs in
// kernels/kernels.h.
//
// Notation: p = target, q = draft; "row" j of p is 0 for the root and i + 1 for node i.
// The walk starts at the root and moves to one accepted child per step, so it visits at most
// depth + 1 rows. Children are found by scanning parents[] (children have larger indices than
// their parent): O(N) per step, no child lists to build or store.
//
// Sampling mode is multi-step speculative sampling (MSS of Miao et al. 2024, "SpecInfer";
// the multi-draft setting of Sun et al. 2023, "SpecTr"). Why it is
// lossless: trying one child is a token-wise speculative sampling step with target r and
// draft q_c, whose output (x on acceptance, else a draw from the next target
// norm(max(0, r - q_c))) is distributed as r. By induction over the remaining children,
// which are independent of the ones tried before, the token leaving a row is distributed as
// p_row, and the subtree of the accepted child was drawn given that token.
//
// The running residual is kept unnormalised: r with mass z, so the acceptance test is
// u * q_c(x) * z < r(x) and the update is r <- max(0, r / z - q_c), a scaled residual
// (verify_math.h) with s = 1 / z. It lives in the caller's [V] double scratch row and is only
// materialised when a rejected child has a later sibling: the first target is p_row itself
// (taken as normalised, z = 1, as verify_row does), and the last rejection samples
// max(0, r / z - q_c) directly. A chain therefore never touches scratch and reproduces
// verify_row's sampling mode bit for bit.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/sd_hd.h"
#include "kernels/verify_math.h"

namespace specdec::kernels::math {

// The inputs of one sequence b, cut out of TreeVerifyArgs.
struct TreeView {
  int64_t max_nodes = 0, n_vocab = 0;
  VerifyMode mode = VerifyMode::greedy;
  const int32_t* tokens = nullptr;   // [N]
  const int32_t* parents = nullptr;  // [N]
  int32_t n_nodes = 0;
  const float* q = nullptr;          // [N, V] (sampling mode) else nullptr
  const float* p = nullptr;          // [N+1, V]
  const double* u = nullptr;         // [N+1] (not read in greedy mode)
  double* scratch = nullptr;         // [V] (sampling mode)
};

SD_HD inline TreeView tree_view(const TreeVerifyArgs& a, int64_t b) {
  TreeView t;
  t.max_nodes = a.max_nodes;
  t.n_vocab = a.vocab;
  t.mode = a.mode;
  t.tokens = a.tokens ? a.tokens + b * a.max_nodes : nullptr;
  t.parents = a.parents ? a.parents + b * a.max_nodes : nullptr;
  t.n_nodes = a.n_nodes ? a.n_nodes[b] : static_cast<int32_t>(a.max_nodes);
  t.q = (a.mode == VerifyMode::sampling && a.q) ? a.q + b * a.max_nodes * a.vocab : nullptr;
  t.p = a.p + b * (a.max_nodes + 1) * a.vocab;
  t.u = a.uniforms ? a.uniforms + b * (a.max_nodes + 1) : nullptr;
  t.scratch = a.scratch ? a.scratch + b * a.vocab : nullptr;
  return t;
}

struct TreeResult {
  int32_t n_accepted = 0;   // accepted path length (depth of last_node + 1, 0 at the root)
  int32_t last_node = -1;   // deepest accepted node, -1: the root
  int32_t next_token = -1;  // the final token (residual, rejected-argmax or bonus)
  int32_t status = kRowOk;  // RowStatus
  int32_t bad_index = -1;   // node (or p row, for kNoMass) of the offending entry
};

SD_HD inline TreeResult tree_error(int32_t status, int32_t index) {
  TreeResult r;
  r.status = status;
  r.bad_index = index;
  return r;
}

// Input checks that need the row's data (done where the data lives: host or device).
SD_HD inline TreeResult check_tree(const TreeView& t) {
  if (t.n_nodes < 0 || t.n_nodes > t.max_nodes) return tree_error(kBadNDraft, t.n_nodes);
  for (int32_t i = 0; i < t.n_nodes; ++i) {
    if (t.tokens[i] < 0 || t.tokens[i] >= t.n_vocab) return tree_error(kBadToken, i);
    if (t.parents[i] < -1 || t.parents[i] >= i) return tree_error(kBadParent, i);
  }
  if (t.mode != VerifyMode::greedy)
    for (int64_t i = 0; i <= t.max_nodes; ++i)
      if (!(t.u[i] >= 0.0 && t.u[i] <= 1.0)) return tree_error(kBadUniform, static_cast<int32_t>(i));
  return TreeResult{};
}

// The first child of `node` (-1: the root) with index > `after`, or -1. Pass after = node
// for the first child: children come after their parent in topological order.
SD_HD inline int32_t next_child(const TreeView& t, int32_t node, int32_t after) {
  for (int32_t j = after + 1; j < t.n_nodes; ++j)
    if (t.parents[j] == node) return j;
  return -1;
}

SD_HD inline int32_t child_with_token(const TreeView& t, int32_t node, int64_t token) {
  for (int32_t c = next_child(t, node, node); c >= 0; c = next_child(t, node, c))
    if (t.tokens[c] == token) return c;
  return -1;
}

// One step of the walk: the accepted child, or (child = -1) the final token (-1: no mass).
struct TreeStep {
  int32_t child;
  int64_t token;
};

SD_HD inline const float* tree_p_row(const TreeView& t, int32_t node) {  // [V]
  return t.p + (static_cast<int64_t>(node) + 1) * t.n_vocab;
}

SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD TreeStep greedy_tree_step(const TreeView& t, Ops& ops, int32_t node) {
  const int64_t y = ops.argmax(tree_p_row(t, node), t.n_vocab);
  return {child_with_token(t, node, y), y};
}

// y ~ p_row decides the step; rows with children use their own uniform, a leaf's bonus uses
// u[N] (so a chain uses u exactly as verify_row's tokens_only mode does).
SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD TreeStep tokens_only_tree_step(const TreeView& t, Ops& ops, int32_t node) {
  const bool has_child = next_child(t, node, node) >= 0;
  const double u = has_child ? t.u[node + 1] : t.u[t.max_nodes];
  const int64_t y = ops.sample(tree_p_row(t, node), nullptr, t.n_vocab, u, 1.0);
  if (y < 0) return {-1, -1};
  return {child_with_token(t, node, y), y};
}

// The running target of sampling mode: p_row (r == nullptr) or the scratch residual.
SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD int64_t sample_target(Ops& ops, const double* r, const float* p_row, const float* q, int64_t n_vocab,
                            double u, double p_scale) {
  return r ? ops.sample(r, q, n_vocab, u, p_scale) : ops.sample(p_row, q, n_vocab, u, p_scale);
}

SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD double materialize_target(Ops& ops, const double* r, const float* p_row, const float* q, int64_t n_vocab,
                                double p_scale, double* dst) {
  return r ? ops.materialize(r, q, n_vocab, p_scale, dst) : ops.materialize(p_row, q, n_vocab, p_scale, dst);
}

SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD TreeStep sampling_tree_step(const TreeView& t, Ops& ops, int32_t node) {
  const int64_t V = t.n_vocab;
  const float* p_row = tree_p_row(t, node);  // [V]
  const double u_final = t.u[t.max_nodes];
  const double* r = nullptr;  // scratch residual once materialised, else the target is p_row
  double z = 1.0;             // mass of the target
  for (int32_t c = next_child(t, node, node); c >= 0;) {
    const int32_t x = t.tokens[c];
    const float* q_c = t.q + static_cast<int64_t>(c) * V;  // [V]
    const double r_x = r ? r[x] : static_cast<double>(p_row[x]);
    // Accept with probability min(1, (r(x) / z) / q_c(x)); like verify_row, exact for z = 1,
    // accepts q_c(x) = 0 < r(x) and never accepts r(x) = 0.
    if (t.u[c] * q_c[x] * z < r_x) return {c, x};
    const int32_t next = next_child(t, node, c);
    const double s = 1.0 / z;
    if (next < 0) {
      int64_t y = sample_target(ops, r, p_row, q_c, V, u_final, s);
      // An empty residual means r / z <= q_c everywhere (equal up to rounding): sample r.
      if (y < 0) y = sample_target(ops, r, p_row, nullptr, V, u_final, 1.0);
      return {-1, y};
    }
    double z_new = materialize_target(ops, r, p_row, q_c, V, s, t.scratch);
    // Same degenerate case with siblings left: the target is (up to rounding) q_c itself, taken
    // as normalised (z = 1) as p_row is; its float sum may differ from 1 by ~1e-8.
    if (z_new == 0.0 && ops.materialize(q_c, nullptr, V, 1.0, t.scratch) > 0.0) z_new = 1.0;
    if (!(z_new > 0.0)) return {-1, -1};  // NaN or no mass anywhere
    r = t.scratch, z = z_new, c = next;
  }
  return {-1, ops.sample(p_row, nullptr, V, u_final, 1.0)};  // a leaf: bonus sample
}

// Verifies one sequence's tree. Ops is verify_row's (argmax, sample, mass) plus
// materialize(p, q, V, s, dst) -> dst = max(0, s p - q), returning its lane-order total.
// Every caller thread gets the same values back (GPU: the block runs this in lockstep).
SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD TreeResult verify_tree_row(const TreeView& t, Ops& ops) {
  TreeResult res = check_tree(t);
  if (res.status != kRowOk) return res;
  int32_t node = -1, depth = 0;
  for (;;) {  // at most n_nodes + 1 steps: the node index grows every step
    const TreeStep step = t.mode == VerifyMode::greedy        ? greedy_tree_step(t, ops, node)
                          : t.mode == VerifyMode::tokens_only ? tokens_only_tree_step(t, ops, node)
                                                              : sampling_tree_step(t, ops, node);
    if (step.child >= 0) {
      node = step.child, ++depth;
      continue;
    }
    if (step.token < 0) return tree_error(kNoMass, node + 1);
    res.next_token = static_cast<int32_t>(step.token);
    break;
  }
  res.n_accepted = depth;
  res.last_node = node;
  return res;
}

// path: [N] accepted nodes root first, then -1; out: [N+1] their tokens, the final token,
// then -1. On error path is all -1 and out holds the offending entry's index in out[0]
// (check_tree_status names it), then -1: CPU and CUDA alike.
SD_HD inline void write_tree_output(const TreeView& t, const TreeResult& res, int32_t* path, int32_t* out) {
  for (int64_t i = 0; i < t.max_nodes; ++i) path[i] = -1;
  for (int64_t i = 0; i <= t.max_nodes; ++i) out[i] = -1;
  if (res.status != kRowOk) {
    out[0] = res.bad_index;
    return;
  }
  int32_t node = res.last_node;
  for (int32_t d = res.n_accepted - 1; d >= 0; --d) {
    path[d] = node;
    out[d] = t.tokens[node];
    node = t.parents[node];
  }
  out[res.n_accepted] = res.next_token;
}

}  // namespace specdec::kernels::math
