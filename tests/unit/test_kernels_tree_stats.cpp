// Monte-Carlo checks of token-tree verification (verify_tree_cpu): sampling mode (multi-step
// speculative sampling, Miao et al. 2024) and tokens_only mode reproduce the target law, and
// the same checks reject planted bugs and a violated precondition (dependent siblings).
//
// Setup: a pair of small Markov "language models" (V = 5..8; target p and draft q rows depend
// on the position and the previous token). One trial drafts a tree of fixed shape from the
// start: the children of a node are independent draws (with replacement, so duplicates occur)
// from q given the node's path; then verify_tree. When it emitted only one token, a second
// round (a new tree) from that token supplies the second. The first two emitted tokens
// (y1, y2) are recorded.
// Pass criteria (fixed seeds, so deterministic), as in test_kernels_block_stats.cpp (shared
// helpers: tests/support/kernel_stats.h):
//   * Pearson chi-square (Boost.Math; expected counts < 5 pooled) of y1 against p(. | start)
//     and of (y1, y2) against p(y1 | start) p(y2 | y1) at N = 1e5 trials: p-value > 1e-3
//     each, and no token of target probability 0 ever emitted;
//   * TV(N) of both laws at N = 1e3, 1e4, 1e5 below B(N) = sqrt(chi2_{k-1}(1 - 1e-3) / N) / 2
//     (Cauchy-Schwarz: TV <= sqrt(X^2 / N) / 2), i.e. shrinking as 1/sqrt(N);
//   * each planted bug fails them decisively: p-value < 1e-6 for y1 or (y1, y2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/tree_math.h"
#include "tests/support/kernel_stats.h"

namespace sk = specdec::kernels;
namespace math = specdec::kernels::math;

namespace test_kernels_tree_stats {  // this file's own names (its tests compile in a batch with others)

namespace ts = specdec::test_support;
using ts::draw;
using ts::random_lm;
using Lm = ts::MarkovLm;

// ---- trees ----------------------------------------------------------------------------------

// A fixed shape: branching[d] children for every node at depth d (the root is depth 0),
// nodes numbered level by level (a topological order).
struct Shape {
  std::vector<int32_t> parents, depth;  // [N]; depth of node i is >= 1
  int32_t max_depth = 0;
};

Shape make_shape(const std::vector<int>& branching) {
  Shape s;
  std::vector<int32_t> level = {-1};
  for (size_t d = 0; d < branching.size(); ++d) {
    std::vector<int32_t> next;
    for (int32_t parent : level)
      for (int c = 0; c < branching[d]; ++c) {
        next.push_back(static_cast<int32_t>(s.parents.size()));
        s.parents.push_back(parent);
        s.depth.push_back(static_cast<int32_t>(d) + 1);
      }
    level = next;
  }
  s.max_depth = static_cast<int32_t>(branching.size());
  return s;
}

using TreeVerifier = std::function<void(const sk::TreeVerifyArgs&)>;

using Round = ts::RoundOutput;  // [B], [B, N+1]

// One batched round: sequence b's tree starts at position pos after token ctx[b] (V: the
// start). Node i's token ~ q(pos + depth - 1 | parent's token); its p row is p(pos + depth |
// its token). With dependent_siblings, every sibling copies the first sibling's token (the
// precondition of multi-step speculative sampling broken on purpose).
Round run_round(const Lm& lm, const Shape& shape, sk::VerifyMode mode, const TreeVerifier& verify, int64_t pos,
                const std::vector<int32_t>& ctx, specdec::Rng& rng, bool dependent_siblings) {
  const int64_t B = static_cast<int64_t>(ctx.size()), N = static_cast<int64_t>(shape.parents.size()), Vn = lm.vocab;
  std::vector<int32_t> tokens(B * N), parents(B * N), n_nodes(B, static_cast<int32_t>(N));
  std::vector<float> q(B * N * Vn), p(B * (N + 1) * Vn);
  std::vector<double> u(B * (N + 1));
  std::vector<double> scratch(B * Vn);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(lm.p(pos, ctx[b]), lm.p(pos, ctx[b]) + Vn, p.begin() + b * (N + 1) * Vn);
    for (int64_t i = 0; i < N; ++i) {
      const int32_t par = shape.parents[i], d = shape.depth[i];
      const int32_t par_tok = par < 0 ? ctx[b] : tokens[b * N + par];
      const float* qrow = lm.q(pos + d - 1, par_tok);
      const bool copy = dependent_siblings && i > 0 && shape.parents[i - 1] == par;
      const int32_t tok = copy ? tokens[b * N + i - 1] : draw(qrow, Vn, rng.uniform());
      tokens[b * N + i] = tok, parents[b * N + i] = par;
      std::copy(qrow, qrow + Vn, q.begin() + (b * N + i) * Vn);
      std::copy(lm.p(pos + d, tok), lm.p(pos + d, tok) + Vn, p.begin() + (b * (N + 1) + i + 1) * Vn);
    }
  }
  for (auto& x : u) x = rng.uniform();
  Round r{std::vector<int32_t>(B), std::vector<int32_t>(B * (N + 1))};
  std::vector<int32_t> path(B * N);
  sk::TreeVerifyArgs a;
  a.batch = B, a.max_nodes = N, a.vocab = Vn, a.mode = mode;
  a.tokens = tokens.data(), a.parents = parents.data(), a.n_nodes = n_nodes.data();
  a.q = q.data(), a.p = p.data(), a.uniforms = u.data(), a.scratch = scratch.data();
  a.n_accepted = r.n_acc.data(), a.path = path.data(), a.out_tokens = r.out.data();
  verify(a);
  return r;
}

struct Simulation : ts::TwoLawCounts {  // y1, (y1, y2) and the TV points at the checkpoints
  using TwoLawCounts::TwoLawCounts;
  double mean_accepted = 0;  // mean path length of the first round
};

Simulation simulate(const Lm& lm, const Shape& shape, sk::VerifyMode mode, const TreeVerifier& verify,
                    uint64_t seed, bool dependent_siblings = false) {
  specdec::Rng rng(seed);
  Simulation sim(lm.vocab);
  int64_t accepted = 0;
  ts::run_two_law_trials(
      lm, 1000, static_cast<int64_t>(shape.parents.size()) + 1, sim,
      [&](int64_t pos, const std::vector<int32_t>& ctx) {
        return run_round(lm, shape, mode, verify, pos, ctx, rng, dependent_siblings);
      },
      [&](int32_t n_acc) { accepted += n_acc; });
  sim.mean_accepted = double(accepted) / ts::kTwoLawCheckpoints.back();
  return sim;
}

using Verdict = ts::TwoLawVerdict;

Verdict judge(const Lm& lm, const Simulation& sim, const char* label) {
  char head[96];
  std::snprintf(head, sizeof head, "  %-24s E[accepted] %.3f;", label, sim.mean_accepted);
  return ts::judge_two_laws(lm, sim, head);
}

void verify_with_cpu(const sk::TreeVerifyArgs& a) { sk::verify_tree_cpu(a); }

// verify_tree_row with test-only Ops: the planted bugs live here, not in the kernel's API.
template <class Ops>
void verify_with(const sk::TreeVerifyArgs& a) {
  for (int64_t b = 0; b < a.batch; ++b) {
    const math::TreeView t = math::tree_view(a, b);
    Ops ops;
    const math::TreeResult r = math::verify_tree_row(t, ops);
    ASSERT_EQ(r.status, math::kRowOk);
    a.n_accepted[b] = r.n_accepted;
    math::write_tree_output(t, r, a.path + b * a.max_nodes, a.out_tokens + b * (a.max_nodes + 1));
  }
}

// Planted bug 1: with all children rejected, the final token is drawn from the running
// residual r itself, forgetting to remove the last rejected child's q.
struct FinalIgnoresQOps : sk::cpu::CpuRowOps {
  template <class T>
  int64_t sample(const T* p, const float*, int64_t n, float u, double = 1.0) const {
    return CpuRowOps::sample(p, nullptr, n, u);
  }
};

// Planted bug 2: the running residual is never updated, so every sibling is judged against
// p (the residual only subtracts the last rejected child's q).
struct StaleResidualOps : sk::cpu::CpuRowOps {
  template <class T>
  double materialize(const T* p, const float*, int64_t n, double s, double* dst) const {
    return CpuRowOps::materialize(p, nullptr, n, s, dst);
  }
};

// Planted bug 3 (tokens_only, by corrupting the input): one uniform for every row of a
// sequence, so y ~ p at consecutive rows are no longer independent.
void verify_with_shared_uniform(const sk::TreeVerifyArgs& a) {
  std::vector<double> u(a.uniforms, a.uniforms + a.batch * (a.max_nodes + 1));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t j = 1; j <= a.max_nodes; ++j) u[b * (a.max_nodes + 1) + j] = u[b * (a.max_nodes + 1)];
  sk::TreeVerifyArgs c = a;
  c.uniforms = u.data();
  sk::verify_tree_cpu(c);
}

class TreePreservesTarget
    : public ::testing::TestWithParam<std::tuple<int64_t, std::vector<int>, sk::VerifyMode, uint64_t>> {};

TEST_P(TreePreservesTarget, ChiSquareAndRootNShrink) {
  const auto& [vocab, branching, mode, seed] = GetParam();
  const Shape shape = make_shape(branching);
  const Lm lm = random_lm(vocab, shape.max_depth + 2, seed);
  const Verdict v = judge(lm, simulate(lm, shape, mode, verify_with_cpu, seed + 1),
                          mode == sk::VerifyMode::sampling ? "sampling" : "tokens_only");
  EXPECT_TRUE(v.passed) << "p-values " << v.p_first << ", " << v.p_pair;
}

INSTANTIATE_TEST_SUITE_P(
    KernelsTreeStats, TreePreservesTarget,
    ::testing::Values(std::make_tuple(6, std::vector<int>{3, 2}, sk::VerifyMode::sampling, 101),
                      std::make_tuple(5, std::vector<int>{2, 2, 1}, sk::VerifyMode::sampling, 102),
                      std::make_tuple(8, std::vector<int>{1, 3}, sk::VerifyMode::sampling, 103),
                      std::make_tuple(4, std::vector<int>{3, 3}, sk::VerifyMode::sampling, 104),
                      std::make_tuple(6, std::vector<int>{3, 2}, sk::VerifyMode::tokens_only, 105)));

TEST(KernelsTreeStats, PlantedBugsAreCaught) {
  // Same problem and seed through verify_tree_row with the correct and with buggy Ops, and
  // tokens_only with shared uniforms: the correct variants pass, every bug fails with a
  // p-value below 1e-6 for y1 or (y1, y2).
  const Shape shape = make_shape({3, 2});
  const Lm lm = random_lm(6, shape.max_depth + 2, 201);
  const uint64_t seed = 202;
  EXPECT_TRUE(judge(lm, simulate(lm, shape, sk::VerifyMode::sampling, verify_with<sk::cpu::CpuRowOps>, seed),
                    "sampling, correct Ops").passed);
  for (const auto& [label, verifier] : {std::make_pair("final ignores q", TreeVerifier(verify_with<FinalIgnoresQOps>)),
                                        std::make_pair("stale residual", TreeVerifier(verify_with<StaleResidualOps>))}) {
    const Verdict v = judge(lm, simulate(lm, shape, sk::VerifyMode::sampling, verifier, seed), label);
    EXPECT_FALSE(v.passed) << label;
    EXPECT_LT(std::min(v.p_first, v.p_pair), 1e-6) << label;
  }
  EXPECT_TRUE(judge(lm, simulate(lm, shape, sk::VerifyMode::tokens_only, verify_with_cpu, seed), "tokens_only").passed);
  const Verdict t = judge(lm, simulate(lm, shape, sk::VerifyMode::tokens_only, verify_with_shared_uniform, seed),
                          "tokens_only, one uniform");
  EXPECT_FALSE(t.passed);
  EXPECT_LT(std::min(t.p_first, t.p_pair), 1e-6);
}

TEST(KernelsTreeStats, DependentSiblingsBreakLosslessness) {
  // The precondition matters: siblings that copy the first sibling's token (instead of being
  // independent draws) make multi-step speculative sampling biased, and the checks see it.
  const Shape shape = make_shape({3, 2});
  const Lm lm = random_lm(6, shape.max_depth + 2, 301);
  const Verdict v = judge(lm, simulate(lm, shape, sk::VerifyMode::sampling, verify_with_cpu, 302, true),
                          "dependent siblings");
  EXPECT_FALSE(v.passed);
  EXPECT_LT(std::min(v.p_first, v.p_pair), 1e-6);
}

}  // namespace test_kernels_tree_stats
