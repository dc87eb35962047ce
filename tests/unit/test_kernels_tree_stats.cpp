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
// Pass criteria (fixed seeds, so deterministic), as in test_kernels_block_stats.cpp:
//   * Pearson chi-square (Boost.Math; expected counts < 5 pooled) of y1 against p(. | start)
//     and of (y1, y2) against p(y1 | start) p(y2 | y1) at N = 1e5 trials: p-value > 1e-3
//     each, and no token of target probability 0 ever emitted;
//   * TV(N) of both laws at N = 1e3, 1e4, 1e5 below B(N) = sqrt(chi2_{k-1}(1 - 1e-3) / N) / 2
//     (Cauchy-Schwarz: TV <= sqrt(X^2 / N) / 2), i.e. shrinking as 1/sqrt(N);
//   * each planted bug fails them decisively: p-value < 1e-6 for y1 or (y1, y2).
#include <gtest/gtest.h>

#include <boost/math/distributions/chi_squared.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/tree_math.h"

namespace sk = specdec::kernels;
namespace math = specdec::kernels::math;

namespace {

// ---- statistics (as test_kernels_block_stats.cpp) --------------------------------------------

struct Fit {
  double p_value = 1.0;
  bool impossible_seen = false;
};

Fit chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t n = 0;
  for (auto c : counts) n += c;
  Fit f;
  double stat = 0, pooled_e = 0;
  int64_t pooled_c = 0;
  int n_cells = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const double e = probs[k] * n;
    if (probs[k] <= 0) {
      f.impossible_seen |= counts[k] > 0;
    } else if (e < 5) {
      pooled_e += e, pooled_c += counts[k];
    } else {
      stat += (counts[k] - e) * (counts[k] - e) / e, ++n_cells;
    }
  }
  if (pooled_e > 0) stat += (pooled_c - pooled_e) * (pooled_c - pooled_e) / pooled_e, ++n_cells;
  if (n_cells > 1) f.p_value = boost::math::cdf(boost::math::complement(boost::math::chi_squared(n_cells - 1), stat));
  return f;
}

struct TvPoint {
  double to_mean = 0, to_bound = 0;  // TV / E[TV], TV / B(n)
};

TvPoint tv_point(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double tv = 0, expected = 0;
  int k = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    tv += std::fabs(double(counts[c]) / n - probs[c]) / 2;
    expected += std::sqrt(2 * probs[c] * (1 - probs[c]) / (M_PI * n)) / 2;
    k += probs[c] > 0;
  }
  const double q = boost::math::quantile(boost::math::chi_squared(std::max(k - 1, 1)), 1 - 1e-3);
  return {tv / expected, tv / (0.5 * std::sqrt(q / n))};
}

// ---- a pair of Markov language models ---------------------------------------------------------

struct Lm {
  int64_t vocab = 0, n_pos = 0;
  std::vector<float> tgt, dft;  // [n_pos, V+1, V]; context V = the start of the text
  const float* p(int64_t pos, int32_t ctx) const { return tgt.data() + (pos * (vocab + 1) + ctx) * vocab; }
  const float* q(int64_t pos, int32_t ctx) const { return dft.data() + (pos * (vocab + 1) + ctx) * vocab; }
};

// Random rows with zero corners: about 1/4 of q and 1/8 of p entries are 0.
Lm random_lm(int64_t vocab, int64_t n_pos, uint64_t seed) {
  specdec::Rng rng(seed);
  Lm lm{vocab, n_pos, std::vector<float>(n_pos * (vocab + 1) * vocab), std::vector<float>(n_pos * (vocab + 1) * vocab)};
  auto fill = [&](float* row, double zero_frac) {
    std::vector<double> w(vocab);
    double s = 0;
    for (auto& x : w) s += (x = rng.uniform() < zero_frac ? 0.0 : std::pow(rng.uniform(), 2.0) + 1e-2);
    if (s == 0) s = w[0] = 1;
    for (int64_t k = 0; k < vocab; ++k) row[k] = static_cast<float>(w[k] / s);
  };
  for (int64_t r = 0; r < n_pos * (vocab + 1); ++r) {
    fill(lm.dft.data() + r * vocab, 0.25);
    fill(lm.tgt.data() + r * vocab, 0.125);
  }
  return lm;
}

std::vector<double> normalised(const float* row, int64_t n) {
  std::vector<double> r(row, row + n);
  double s = 0;
  for (double x : r) s += x;
  for (double& x : r) x /= s;
  return r;
}

std::vector<double> first_law(const Lm& lm) { return normalised(lm.p(0, lm.vocab), lm.vocab); }

std::vector<double> pair_law(const Lm& lm) {
  const std::vector<double> first = first_law(lm);
  std::vector<double> law(lm.vocab * lm.vocab);
  for (int32_t a = 0; a < lm.vocab; ++a) {
    const std::vector<double> next = normalised(lm.p(1, a), lm.vocab);
    for (int32_t b = 0; b < lm.vocab; ++b) law[a * lm.vocab + b] = first[a] * next[b];
  }
  return law;
}

int32_t draw(const float* row, int64_t vocab, double u) {
  double total = 0, cum = 0;
  for (int64_t k = 0; k < vocab; ++k) total += row[k];
  int32_t last = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    if (row[k] <= 0) continue;
    cum += row[k], last = static_cast<int32_t>(k);
    if (u * total < cum) return last;
  }
  return last;
}

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

struct Round {
  std::vector<int32_t> n_acc, out;  // [B], [B, N+1]
};

// One batched round: sequence b's tree starts at position pos after token ctx[b] (V: the
// start). Node i's token ~ q(pos + depth - 1 | parent's token); its p row is p(pos + depth |
// its token). With dependent_siblings, every sibling copies the first sibling's token (the
// precondition of multi-step speculative sampling broken on purpose).
Round run_round(const Lm& lm, const Shape& shape, sk::VerifyMode mode, const TreeVerifier& verify, int64_t pos,
                const std::vector<int32_t>& ctx, specdec::Rng& rng, bool dependent_siblings) {
  const int64_t B = static_cast<int64_t>(ctx.size()), N = static_cast<int64_t>(shape.parents.size()), Vn = lm.vocab;
  std::vector<int32_t> tokens(B * N), parents(B * N), n_nodes(B, static_cast<int32_t>(N));
  std::vector<float> q(B * N * Vn), p(B * (N + 1) * Vn), u(B * (N + 1));
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
  for (auto& x : u) x = rng.uniformf();
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

struct Simulation {
  std::vector<int64_t> first, pair;  // counts of y1 [V] and (y1, y2) [V*V]
  double mean_accepted = 0;          // mean path length of the first round
  std::vector<TvPoint> tv_first, tv_pair;
};

const std::vector<int64_t> kCheckpoints = {1000, 10000, 100000};

Simulation simulate(const Lm& lm, const Shape& shape, sk::VerifyMode mode, const TreeVerifier& verify,
                    uint64_t seed, bool dependent_siblings = false) {
  const int64_t B = 1000, N1 = static_cast<int64_t>(shape.parents.size()) + 1, Vn = lm.vocab;
  specdec::Rng rng(seed);
  Simulation sim{std::vector<int64_t>(Vn), std::vector<int64_t>(Vn * Vn), 0.0, {}, {}};
  const std::vector<double> law1 = first_law(lm), law2 = pair_law(lm);
  int64_t accepted = 0;
  for (int64_t n = 0; n < kCheckpoints.back();) {
    const std::vector<int32_t> start(B, static_cast<int32_t>(Vn));
    const Round r1 = run_round(lm, shape, mode, verify, 0, start, rng, dependent_siblings);
    std::vector<int32_t> again;
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* out = r1.out.data() + b * N1;
      sim.first[out[0]]++;
      accepted += r1.n_acc[b];
      if (r1.n_acc[b] >= 1) sim.pair[out[0] * Vn + out[1]]++;
      else again.push_back(out[0]);
    }
    if (!again.empty()) {
      const Round r2 = run_round(lm, shape, mode, verify, 1, again, rng, dependent_siblings);
      for (size_t k = 0; k < again.size(); ++k) sim.pair[again[k] * Vn + r2.out[k * N1]]++;
    }
    n += B;
    for (int64_t cp : kCheckpoints)
      if (n == cp) {
        sim.tv_first.push_back(tv_point(sim.first, law1, n));
        sim.tv_pair.push_back(tv_point(sim.pair, law2, n));
      }
  }
  sim.mean_accepted = double(accepted) / kCheckpoints.back();
  return sim;
}

struct Verdict {
  bool passed = true;
  double p_first = 1, p_pair = 1;
};

Verdict judge(const Lm& lm, const Simulation& sim, const char* label) {
  const Fit f1 = chi_square(sim.first, first_law(lm)), f2 = chi_square(sim.pair, pair_law(lm));
  Verdict v;
  v.p_first = f1.p_value, v.p_pair = f2.p_value;
  v.passed = f1.p_value > 1e-3 && f2.p_value > 1e-3 && !f1.impossible_seen && !f2.impossible_seen;
  for (const auto* tv : {&sim.tv_first, &sim.tv_pair})
    for (const TvPoint& t : *tv) v.passed &= t.to_bound <= 1.0;
  std::printf("  %-24s E[accepted] %.3f; p-value y1 %.3g, (y1,y2) %.3g; N = 1e3, 1e4, 1e5: TV/E[TV] (TV/B) y1",
              label, sim.mean_accepted, v.p_first, v.p_pair);
  for (const TvPoint& t : sim.tv_first) std::printf(" %.2f (%.2f)", t.to_mean, t.to_bound);
  std::printf(", (y1,y2)");
  for (const TvPoint& t : sim.tv_pair) std::printf(" %.2f (%.2f)", t.to_mean, t.to_bound);
  std::printf(" -> %s\n", v.passed ? "pass" : "FAIL");
  return v;
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
  std::vector<float> u(a.uniforms, a.uniforms + a.batch * (a.max_nodes + 1));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t j = 1; j <= a.max_nodes; ++j) u[b * (a.max_nodes + 1) + j] = u[b * (a.max_nodes + 1)];
  sk::TreeVerifyArgs c = a;
  c.uniforms = u.data();
  sk::verify_tree_cpu(c);
}

}  // namespace

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
