#pragma once
// An independent reference verifier for speculative decoding, for tests only: plain C++ (std
// only), sharing no code with kernels/ or src/, written from the papers:
//   * token-wise speculative sampling: Leviathan et al. 2023, "Fast Inference from Transformers
//     via Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model Decoding
//     with Speculative Sampling";
//   * block verification: Sun et al. 2025, "Block Verification Accelerates Speculative
//     Decoding" (ICLR 2025);
//   * tree verification by multi-step speculative sampling over i.i.d. siblings: Miao et al.
//     2024, "SpecInfer".
// Notation: p = target, q = draft, x_i = the drafted token at position i.
//
// Randomness is a parameter. The logic asks a source two things:
//   src.accept(j, prob)    -> true with probability prob (uniform u[j]: u[j] < prob),
//   src.sample(j, weights) -> a token with probability weights / total (inverse CDF at u[j]),
//                             -1 when no weight is positive.
// UniformSource (below) answers from an array of uniforms, so results can be compared draw by
// draw with the kernels on the same uniforms; EnumerationSource (exact_enumeration.h) branches
// on every answer with its exact probability, so the same code yields the exact output law.
//
// Uniform-index conventions (those of kernels/kernels.h, so that the comparison is per draw):
//   chain (max length gamma, n = n_draft <= gamma): u[i] decides position i (acceptance, or
//     the sample y_i of tokens_only; block: u[i-1] for its h_i, i = 1..n); u[gamma] drives the
//     final sample (residual or bonus);
//   tree with N nodes (N = max_nodes): sampling uses u[c] for child c and u[N] for the final
//     sample; tokens_only uses u[node + 1] at a row with children (u[0] at the root), u[N] at
//     a leaf; greedy reads no uniform.
// Children of a node are tried in node-index order. Argmax ties go to the lowest token id.
//
// Inverse CDF: the first token in index order whose running sum of the unnormalised weights
// exceeds u * total, in double. The kernels walk kLanes = 256 interleaved lanes instead
// (kernels/verify_math.h), which is index order exactly when V <= 256: draw-by-draw
// comparisons use V <= 256.
//
// Input rows are taken as given (as distributions, not renormalised), as the kernels take them.
// Events of probability zero need a convention to compare draw by draw (any choice is
// lossless): an empty residual max(0, r - q) (r <= q everywhere, so r = q as distributions)
// falls back to the target r in chains and to q_c, taken as given, in trees. (The tree kernel
// renormalises that q_c by its double sum; the two agree when rows sum to exactly 1, see
// TreeBatch in test_kernels_reference.cpp.)
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

namespace specdec::reference {

using Row = std::vector<double>;  // weights or probabilities over the V tokens

enum class Mode { greedy, sampling, tokens_only, block };

// Deliberate bugs, planted to show that the tests catch them (test_kernels_reference.cpp).
enum class Plant {
  none,
  penalty_without_path,     // processors: the repetition penalty sees the committed text only
  pq_swapped_at_depth_1,    // chain sampling: p and q exchanged at position 1
  sibling_residual_stale,   // tree sampling: r not updated after a rejected sibling
  block_h_shifted,          // block: h_i computed from the rows of position i, not i + 1
  bonus_row_shifted,        // chain: bonus sampled from p[n - 1] instead of p[n]
  residual_unnormalised,    // tree sampling: r <- max(0, r - q_c) without renormalising
  greedy_ties_to_highest,   // greedy: argmax ties go to the highest id
  residual_reuses_uniform,  // chain sampling: the residual sample reuses u[i] of the rejection
  mask_after_filters,       // processors: the grammar mask after top-k/top-p/min-p, not first
};

struct Outcome {
  int accepted = -1;        // accepted draft tokens (chain) or path length (tree); -1: no mass
  std::vector<int> tokens;  // the accepted tokens, then the final token
  std::vector<int> path;    // tree: the accepted nodes, root first
};

// ---- rows ---------------------------------------------------------------------------------

inline double row_total(const Row& w) {
  double total = 0.0;
  for (double x : w) total += x;
  return total;
}

// Inverse CDF in index order (see the top). Rounding slack (u * total not below the final
// running sum) takes the last positive token.
inline int inverse_cdf(const Row& w, double u) {
  const double total = row_total(w);
  if (!(total > 0.0)) return -1;
  const double target = u * total;
  double cum = 0.0;
  int last = -1;
  for (size_t k = 0; k < w.size(); ++k) {
    if (!(w[k] > 0.0)) continue;
    cum += w[k];
    last = static_cast<int>(k);
    if (target < cum) return last;
  }
  return last;
}

// Ties to the lowest id (the greedy decoding convention); the plant flips it.
inline int argmax(const Row& r, Plant plant = Plant::none) {
  int best = 0;
  for (size_t k = 1; k < r.size(); ++k) {
    const bool better = plant == Plant::greedy_ties_to_highest ? r[k] >= r[best] : r[k] > r[best];
    if (better) best = static_cast<int>(k);
  }
  return best;
}

// max(0, s r - q), formed in double.
inline Row residual(const Row& r, const Row& q, double s = 1.0) {
  Row out(r.size());
  for (size_t k = 0; k < r.size(); ++k) out[k] = std::max(0.0, s * r[k] - q[k]);
  return out;
}

inline Row normalised(Row w) {
  const double total = row_total(w);
  for (double& x : w) x /= total;
  return w;
}

// min(1, r(x) / q(x)), with q(x) = 0 < r(x) (a token the draft could not have drawn) accepted
// and r(x) = 0 never accepted.
inline double accept_prob(double r_x, double q_x) {
  if (!(r_x > 0.0)) return 0.0;
  return q_x > 0.0 ? std::min(1.0, r_x / q_x) : 1.0;
}

// ---- uniforms -----------------------------------------------------------------------------

// Answers from uniforms u[0..n) in [0, 1): accept iff u[j] < prob; sample by inverse CDF.
class UniformSource {
 public:
  UniformSource(const double* u, int n) : u_(u), n_(n) {}
  bool accept(int j, double prob) const { return at(j) < prob; }
  int sample(int j, const Row& weights) const { return inverse_cdf(weights, at(j)); }

 private:
  double at(int j) const {
    assert(j >= 0 && j < n_);
    return u_[j];
  }
  const double* u_;
  int n_;
};

// ---- chains -------------------------------------------------------------------------------

struct ChainInput {
  std::vector<int> draft;  // x_0..x_{n-1}
  std::vector<Row> q;      // [n]: q[i] is the row x_i was drawn from (sampling, block)
  std::vector<Row> p;      // [n + 1]: p[i] is the target after the first i draft tokens
  int final_u = 0;         // gamma: the uniform of the final sample
  int n() const { return static_cast<int>(draft.size()); }
};

inline Outcome accepted_then(const ChainInput& in, int a, int token) {
  Outcome o;
  o.accepted = token < 0 ? -1 : a;
  o.tokens.assign(in.draft.begin(), in.draft.begin() + a);
  o.tokens.push_back(token);
  return o;
}

// The row of the bonus token after n accepted tokens.
inline const Row& bonus_row(const ChainInput& in, Plant plant) {
  const int n = in.n();
  return plant == Plant::bonus_row_shifted && n > 0 ? in.p[n - 1] : in.p[n];
}

template <class Src>
Outcome chain_greedy(const ChainInput& in, Src&, Plant plant) {
  for (int i = 0; i < in.n(); ++i) {
    const int y = argmax(in.p[i], plant);
    if (y != in.draft[i]) return accepted_then(in, i, y);
  }
  return accepted_then(in, in.n(), argmax(bonus_row(in, plant), plant));
}

// Token-wise speculative sampling: accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
// at the first rejection emit a sample of norm(max(0, p_i - q_i)); else a bonus from p_n.
template <class Src>
Outcome chain_sampling(const ChainInput& in, Src& src, Plant plant) {
  for (int i = 0; i < in.n(); ++i) {
    const bool swap = plant == Plant::pq_swapped_at_depth_1 && i == 1;
    const Row& p = swap ? in.q[i] : in.p[i];
    const Row& q = swap ? in.p[i] : in.q[i];
    const int x = in.draft[i];
    if (src.accept(i, accept_prob(p[x], q[x]))) continue;
    const Row rest = residual(p, q);
    const int j = plant == Plant::residual_reuses_uniform ? i : in.final_u;
    const int y = src.sample(j, row_total(rest) > 0.0 ? rest : p);  // empty: p = q, see the top
    return accepted_then(in, i, y);
  }
  return accepted_then(in, in.n(), src.sample(in.final_u, bonus_row(in, plant)));
}

// Drafts without q (n-gram, prompt lookup): y_i ~ p_i; accept while y_i == x_i.
template <class Src>
Outcome chain_tokens_only(const ChainInput& in, Src& src, Plant plant) {
  for (int i = 0; i < in.n(); ++i) {
    const int y = src.sample(i, in.p[i]);
    if (y != in.draft[i]) return accepted_then(in, i, y);
  }
  return accepted_then(in, in.n(), src.sample(in.final_u, bonus_row(in, plant)));
}

// ---- block verification (Sun et al. 2025) --------------------------------------------------
// 1-based positions i = 1..n; p_i, q_i are the rows x_i is judged by (storage row i - 1):
//   w_0 = 1, w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i))
//   h_i = S_i / (S_i + 1 - w_i), S_i = sum_x max(0, w_i p_{i+1}(x) - q_{i+1}(x))  (i < n)
//   h_n = w_n
//   tau = the largest i with u_i < h_i (0 if none); the next token is drawn from p_{n+1} when
//   tau = n, else from norm(max(0, w_tau p_{tau+1} - q_{tau+1})).
// Walking i = n, n-1, ... and stopping at the first success gives the largest such i, and
// every h_i is tested with its own uniform.

inline double block_weight_step(double w, double p_x, double q_x) {
  const double wp = w * p_x;
  if (!(wp > 0.0)) return 0.0;
  return q_x > 0.0 ? std::min(1.0, wp / q_x) : 1.0;
}

inline double block_stop_prob(double w, const Row& p_next, const Row& q_next) {
  const double s = row_total(residual(p_next, q_next, w));
  const double denom = s + (1.0 - w);
  return denom > 0.0 ? s / denom : 1.0;  // 0/0: w = 1 and p_next = q_next, the w -> 1 limit
}

template <class Src>
Outcome chain_block(const ChainInput& in, Src& src, Plant plant) {
  const int n = in.n();
  std::vector<double> w(n + 1, 1.0);
  for (int i = 1; i <= n; ++i) {
    const int x = in.draft[i - 1];
    w[i] = block_weight_step(w[i - 1], in.p[i - 1][x], in.q[i - 1][x]);
  }
  int tau = 0;
  for (int i = n; i >= 1; --i) {
    const int next = plant == Plant::block_h_shifted ? i - 1 : i;  // storage row of p_{i+1}
    const double h = i == n ? w[n] : block_stop_prob(w[i], in.p[next], in.q[next]);
    if (src.accept(i - 1, h)) {
      tau = i;
      break;
    }
  }
  if (tau == n) return accepted_then(in, n, src.sample(in.final_u, bonus_row(in, plant)));
  const Row rest = residual(in.p[tau], in.q[tau], w[tau]);
  return accepted_then(in, tau, src.sample(in.final_u, row_total(rest) > 0.0 ? rest : in.p[tau]));
}

template <class Src>
Outcome verify_chain(Mode mode, const ChainInput& in, Src& src, Plant plant = Plant::none) {
  switch (mode) {
    case Mode::greedy: return chain_greedy(in, src, plant);
    case Mode::sampling: return chain_sampling(in, src, plant);
    case Mode::tokens_only: return chain_tokens_only(in, src, plant);
    case Mode::block: return chain_block(in, src, plant);
  }
  return Outcome{};
}

// ---- trees --------------------------------------------------------------------------------

struct TreeInput {
  std::vector<int> tokens;   // [n] node tokens
  std::vector<int> parents;  // [n] parent node (< own index), -1: a child of the root
  std::vector<Row> q;        // [n]: q[c] is the row node c was drawn from (sampling)
  std::vector<Row> p;        // [n + 1]: p[0] after the root, p[c + 1] after node c
  int final_u = 0;           // N (max nodes): the uniform of the final sample
  int n() const { return static_cast<int>(tokens.size()); }
};

inline std::vector<int> children(const TreeInput& t, int node) {
  std::vector<int> kids;
  for (int c = node + 1; c < t.n(); ++c)
    if (t.parents[c] == node) kids.push_back(c);
  return kids;
}

inline int child_with_token(const TreeInput& t, const std::vector<int>& kids, int token) {
  for (int c : kids)
    if (t.tokens[c] == token) return c;
  return -1;
}

struct Step {
  int child;  // the accepted child, or -1: stop with `token`
  int token;  // the final token when child < 0 (-1: no mass)
};

template <class Src>
Step tree_greedy_step(const TreeInput& t, Src&, int node, Plant plant) {
  const int y = argmax(t.p[node + 1], plant);
  return {child_with_token(t, children(t, node), y), y};
}

template <class Src>
Step tree_tokens_only_step(const TreeInput& t, Src& src, int node) {
  const std::vector<int> kids = children(t, node);
  const int y = src.sample(kids.empty() ? t.final_u : node + 1, t.p[node + 1]);
  return {y < 0 ? -1 : child_with_token(t, kids, y), y};
}

// Multi-step speculative sampling: r starts as p_row; child c (token x) is accepted with
// probability min(1, r(x) / q_c(x)), else r <- norm(max(0, r - q_c)) and the next child is
// tried; all rejected: the final token ~ r. Each try is a token-wise step with target r, whose
// output is distributed as r; the untried siblings are independent of the tried ones, so by
// induction the token leaving the row is distributed as p_row. A leaf emits a bonus ~ p_row.
template <class Src>
Step tree_sampling_step(const TreeInput& t, Src& src, int node, Plant plant) {
  const std::vector<int> kids = children(t, node);
  Row r = t.p[node + 1];
  for (size_t k = 0; k < kids.size(); ++k) {
    const int c = kids[k], x = t.tokens[c];
    if (src.accept(c, accept_prob(r[x], t.q[c][x]))) return {c, x};
    if (plant == Plant::sibling_residual_stale) continue;
    const Row rest = residual(r, t.q[c]);
    // Empty: r = q_c as distributions (see the top); q_c is then taken as given, as p_row is,
    // so a later sibling with the same row finds an empty residual again, not rounding noise.
    const bool empty = !(row_total(rest) > 0.0);
    // The last rejection samples norm(rest) directly (the inverse CDF normalises).
    if (k + 1 == kids.size()) return {-1, src.sample(t.final_u, empty ? t.q[c] : rest)};
    r = empty ? t.q[c] : plant == Plant::residual_unnormalised ? rest : normalised(rest);
  }
  return {-1, src.sample(t.final_u, r)};  // a leaf (bonus ~ p_row), or a planted stale r
}

template <class Src>
Outcome verify_tree(Mode mode, const TreeInput& t, Src& src, Plant plant = Plant::none) {
  assert(mode != Mode::block);  // block verification is defined for chains only
  Outcome o;
  int node = -1;
  for (;;) {
    const Step s = mode == Mode::greedy        ? tree_greedy_step(t, src, node, plant)
                   : mode == Mode::tokens_only ? tree_tokens_only_step(t, src, node)
                                               : tree_sampling_step(t, src, node, plant);
    if (s.child < 0) {
      o.accepted = s.token < 0 ? -1 : static_cast<int>(o.path.size());
      o.tokens.push_back(s.token);
      return o;
    }
    node = s.child;
    o.path.push_back(node);
    o.tokens.push_back(t.tokens[node]);
  }
}

}  // namespace specdec::reference
