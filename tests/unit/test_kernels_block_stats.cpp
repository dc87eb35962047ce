// Monte-Carlo checks of block verification (VerifyMode::block; Sun et al. 2025): the emitted
// text follows the target, the same checks reject planted wrong residuals, and on the SAME
// drafts and uniforms block verification accepts at least as many tokens as token-wise
// speculative sampling (strictly more on the paper's example).
//
// Setup: a pair of small Markov "language models" (V = 5..8): the target row p and the draft
// row q depend on the position and the previous token, so a kernel that used a wrong row, a
// wrong prefix or a wrong weight would change the law of the text. One trial is one round of
// speculative decoding from the start (draft gamma tokens from q, verify), plus a second
// round from the first token when the first round emitted only one token; the first two
// emitted tokens (y1, y2) are recorded.
// Pass criteria (fixed seeds, so deterministic):
//   * Pearson chi-square (Boost.Math's chi-square law; expected counts < 5 pooled) of y1
//     against p(. | start) and of (y1, y2) against p(y1 | start) p(y2 | y1) at N = 1e5
//     trials: p-value > 1e-3 each, and no token of target probability 0 ever emitted;
//   * total variation TV(N) of both laws at N = 1e3, 1e4, 1e5 below the 1/sqrt(N) bound
//     B(N) = sqrt(chi2_{k-1}(1 - 1e-3) / N) / 2 (k categories of positive probability): by
//     Cauchy-Schwarz TV <= sqrt(X^2 / N) / 2 for Pearson's statistic X^2, which exceeds that
//     quantile with probability ~1e-3 when the law is right. A biased sampler's TV stays
//     near its bias and crosses B(N) as N grows. TV / E[TV] (E[TV] ~= sum_k sqrt(p_k (1 - p_k)
//     / (2 pi N))) is printed: it stays near 1 when TV shrinks as 1/sqrt(N);
//   * a planted bug must fail them decisively: p-value < 1e-6 for one of the laws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"
#include "tests/reference/exact_enumeration.h"
#include "tests/reference/reference_verifier.h"
#include "tests/support/kernel_stats.h"

namespace sk = specdec::kernels;
namespace math = specdec::kernels::math;
namespace ref = specdec::reference;

namespace {

namespace ts = specdec::test_support;
using ts::chi_square;
using ts::draw;
using ts::random_lm;
using Lm = ts::MarkovLm;

// The motivating example of Sun et al. (2025): context-free p = (1/3, 2/3), q = (2/3, 1/3). With gamma = 2,
// token-wise verification accepts 10/9 tokens per round on average, block verification 11/9.
Lm paper_lm(int64_t n_pos) {
  Lm lm{2, n_pos, {}, {}};
  for (int64_t r = 0; r < n_pos * 3; ++r) {
    lm.tgt.insert(lm.tgt.end(), {1.0f / 3, 2.0f / 3});
    lm.dft.insert(lm.dft.end(), {2.0f / 3, 1.0f / 3});
  }
  return lm;
}

// ---- simulation ---------------------------------------------------------------------------------

using Verifier = std::function<void(const sk::VerifyArgs&)>;

// One batched round of speculative decoding: sequence b starts at position pos after token
// ctx[b] (V: the start), drafts gamma tokens from q and is verified.
using Round = ts::RoundOutput;  // [B], [B, gamma+1]

Round run_round(const Lm& lm, int64_t gamma, sk::VerifyMode mode, const Verifier& verify, int64_t pos,
                const std::vector<int32_t>& ctx, specdec::Rng& rng) {
  const int64_t B = static_cast<int64_t>(ctx.size()), G = gamma, Vn = lm.vocab;
  std::vector<int32_t> draft(B * G), n_draft(B, static_cast<int32_t>(G));
  std::vector<float> q(B * G * Vn), p(B * (G + 1) * Vn);
  std::vector<double> u(B * (G + 1));
  for (int64_t b = 0; b < B; ++b) {
    int32_t c = ctx[b];
    for (int64_t i = 0; i <= G; ++i) {
      std::copy(lm.p(pos + i, c), lm.p(pos + i, c) + Vn, p.begin() + (b * (G + 1) + i) * Vn);
      if (i == G) break;
      std::copy(lm.q(pos + i, c), lm.q(pos + i, c) + Vn, q.begin() + (b * G + i) * Vn);
      c = draft[b * G + i] = draw(lm.q(pos + i, c), Vn, rng.uniform());
    }
  }
  for (auto& x : u) x = rng.uniform();
  Round r{std::vector<int32_t>(B), std::vector<int32_t>(B * (G + 1))};
  sk::VerifyArgs a;
  a.batch = B, a.gamma = G, a.vocab = Vn, a.mode = mode;
  a.draft_tokens = draft.data(), a.n_draft = n_draft.data(), a.q = q.data(), a.p = p.data();
  a.uniforms = u.data(), a.n_accepted = r.n_acc.data(), a.out_tokens = r.out.data();
  verify(a);
  return r;
}

struct Simulation : ts::TwoLawCounts {  // y1, (y1, y2) and the TV points at the checkpoints
  using TwoLawCounts::TwoLawCounts;
  std::vector<int32_t> tau;  // accepted length of the first round, per trial
};

// Two generators: the first rounds (drafts and uniforms) depend only on `seed`, so two modes
// simulated with the same seed see the same first-round draws.
Simulation simulate(const Lm& lm, int64_t gamma, sk::VerifyMode mode, const Verifier& verify, uint64_t seed) {
  specdec::Rng rng_first(seed), rng_second(seed * 7919 + 1);
  Simulation sim(lm.vocab);
  ts::run_two_law_trials(
      lm, 1000, gamma + 1, sim,
      [&](int64_t pos, const std::vector<int32_t>& ctx) {
        return run_round(lm, gamma, mode, verify, pos, ctx, pos == 0 ? rng_first : rng_second);
      },
      [&](int32_t n_acc) { sim.tau.push_back(n_acc); });
  return sim;
}

using Verdict = ts::TwoLawVerdict;

Verdict judge(const Lm& lm, const Simulation& sim, const char* label) {
  char head[64];
  std::snprintf(head, sizeof head, "  %-27s", label);
  return ts::judge_two_laws(lm, sim, head);
}

void verify_with_cpu(const sk::VerifyArgs& a) { sk::verify_cpu(a); }

// verify_row with test-only Ops: the planted bugs live here, not in the kernel's API.
template <class Ops>
void verify_with(const sk::VerifyArgs& a) {
  for (int64_t b = 0; b < a.batch; ++b) {
    const math::RowView row = math::row_view(a, b);
    Ops ops;
    const math::RowResult r = math::verify_row(row, ops);
    ASSERT_EQ(r.status, math::kRowOk);
    a.n_accepted[b] = r.n_accepted;
    math::write_row_output(row, r, a.out_tokens + b * (a.gamma + 1));
  }
}

// Planted bug 1: the correction token is drawn from p instead of the residual.
struct ResidualIsPOps : sk::cpu::CpuRowOps {
  template <class T>
  int64_t sample(const T* p, const float*, int64_t n, float u, double = 1.0) const {
    return CpuRowOps::sample(p, nullptr, n, u);
  }
};

// Planted bug 2 (block-specific): the residual ignores the block weight, max(0, p - q)
// instead of max(0, w_tau p - q) (h_i still uses the weights).
struct UnweightedResidualOps : sk::cpu::CpuRowOps {
  template <class T>
  int64_t sample(const T* p, const float* q, int64_t n, float u, double = 1.0) const {
    return CpuRowOps::sample(p, q, n, u, 1.0);
  }
};

// ---- exact expected accepted length ---------------------------------------------------------------

// E[tau] of one round from the start, exactly, for token-wise and block verification: the
// independent reference verifier (tests/reference/reference_verifier.h, written from the papers)
// run over every draft (with its probability under q) and every acceptance branch.
struct ExpectedTau {
  double token_wise = 0, block = 0;
};

double expected_accepted(const Lm& lm, int64_t gamma, ref::Mode mode) {
  double mean = 0;
  ref::Enumerator e;
  e.for_each_path(
      [&](ref::Enumerator& en) {
        ref::ChainInput in;
        in.final_u = static_cast<int>(gamma);
        int32_t prev = static_cast<int32_t>(lm.vocab);  // the start
        for (int64_t i = 0; i <= gamma; ++i) {
          in.p.emplace_back(lm.p(i, prev), lm.p(i, prev) + lm.vocab);
          if (i == gamma) break;
          in.q.emplace_back(lm.q(i, prev), lm.q(i, prev) + lm.vocab);
          in.draft.push_back(prev = en.choose(in.q.back()));
        }
        ref::EnumerationSource src(en);
        return ref::verify_chain(mode, in, src).accepted;
      },
      [&](int accepted, double prob) { mean += prob * accepted; });
  return mean;
}

ExpectedTau exact_tau(const Lm& lm, int64_t gamma) {
  return {expected_accepted(lm, gamma, ref::Mode::sampling), expected_accepted(lm, gamma, ref::Mode::block)};
}

struct MeanDiff {
  double mean_a = 0, mean_b = 0, diff = 0, diff_se = 0;  // mean(b - a) and its standard error
};

MeanDiff paired(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const double n = static_cast<double>(a.size());
  MeanDiff m;
  double sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m.mean_a += a[i] / n, m.mean_b += b[i] / n;
    const double d = b[i] - a[i];
    m.diff += d / n, sq += d * d / n;
  }
  m.diff_se = std::sqrt((sq - m.diff * m.diff) / n);
  return m;
}

double sd_of_mean(const std::vector<int32_t>& t) {
  double m = 0, sq = 0;
  for (int32_t x : t) m += x, sq += double(x) * x;
  m /= t.size(), sq /= t.size();
  return std::sqrt((sq - m * m) / t.size());
}

}  // namespace

TEST(KernelsBlockStats, ChiSquareLawIsBoostsAndPoolingWorks) {
  // A perfect fit has p-value 1; a 10 % shift on 1e4 draws of a fair coin is decisive.
  EXPECT_NEAR(chi_square({5000, 5000}, {0.5, 0.5}).p_value, 1.0, 1e-12);
  EXPECT_LT(chi_square({5500, 4500}, {0.5, 0.5}).p_value, 1e-20);
  // df 1, statistic 3.841 -> 5 % (table value).
  EXPECT_NEAR(ts::chi_square_sf(1, 3.841), 0.05, 1e-4);
  EXPECT_TRUE(chi_square({10, 0}, {1.0, 0.0}).p_value == 1.0);
  EXPECT_TRUE(chi_square({9, 1}, {1.0, 0.0}).impossible_seen);
}

class BlockPreservesTarget : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, uint64_t>> {};

TEST_P(BlockPreservesTarget, ChiSquareAndRootNShrink) {
  const auto [vocab, gamma, seed] = GetParam();
  const Lm lm = random_lm(vocab, gamma + 2, seed);
  const Verdict v = judge(lm, simulate(lm, gamma, sk::VerifyMode::block, verify_with_cpu, seed + 1), "block");
  EXPECT_TRUE(v.passed) << "p-values " << v.p_first << ", " << v.p_pair;
}

INSTANTIATE_TEST_SUITE_P(KernelsBlockStats, BlockPreservesTarget,
                         ::testing::Values(std::make_tuple(6, 3, 11), std::make_tuple(5, 2, 12),
                                           std::make_tuple(8, 3, 13)));

TEST(KernelsBlockStats, AcceptsAtLeastAsMuchAsTokenWiseOnTheSameDraws) {
  // Random models: both modes lossless on the same first-round draws; each mean accepted
  // length within 5 standard errors of its exact value; block's exact value >= token-wise's
  // and the paired difference of the means >= -3 standard errors.
  const Lm lm = random_lm(6, 5, 21);
  const Simulation tok = simulate(lm, 3, sk::VerifyMode::sampling, verify_with_cpu, 22);
  const Simulation blk = simulate(lm, 3, sk::VerifyMode::block, verify_with_cpu, 22);
  EXPECT_TRUE(judge(lm, tok, "token-wise (random)").passed);
  EXPECT_TRUE(judge(lm, blk, "block (random)").passed);
  const ExpectedTau e = exact_tau(lm, 3);
  const MeanDiff m = paired(tok.tau, blk.tau);
  std::printf("  random models, gamma 3: E[tau] token-wise %.4f (exact %.4f), block %.4f (exact %.4f), "
              "paired difference %.4f +- %.4f\n", m.mean_a, e.token_wise, m.mean_b, e.block, m.diff, m.diff_se);
  EXPECT_NEAR(m.mean_a, e.token_wise, 5 * sd_of_mean(tok.tau));
  EXPECT_NEAR(m.mean_b, e.block, 5 * sd_of_mean(blk.tau));
  EXPECT_GE(e.block, e.token_wise - 1e-12);
  EXPECT_GT(m.diff, -3 * m.diff_se);

  // The paper's example: exactly 10/9 vs 11/9, and block is ahead by many standard errors.
  const Lm ex = paper_lm(4);
  const ExpectedTau ee = exact_tau(ex, 2);
  EXPECT_NEAR(ee.token_wise, 10.0 / 9, 1e-6);
  EXPECT_NEAR(ee.block, 11.0 / 9, 1e-6);
  const Simulation tok2 = simulate(ex, 2, sk::VerifyMode::sampling, verify_with_cpu, 23);
  const Simulation blk2 = simulate(ex, 2, sk::VerifyMode::block, verify_with_cpu, 23);
  EXPECT_TRUE(judge(ex, tok2, "token-wise (paper example)").passed);
  EXPECT_TRUE(judge(ex, blk2, "block (paper example)").passed);
  const MeanDiff m2 = paired(tok2.tau, blk2.tau);
  std::printf("  paper example, gamma 2: E[tau] token-wise %.4f (10/9), block %.4f (11/9), "
              "paired difference %.4f +- %.4f\n", m2.mean_a, m2.mean_b, m2.diff, m2.diff_se);
  EXPECT_NEAR(m2.mean_a, 10.0 / 9, 5 * sd_of_mean(tok2.tau));
  EXPECT_NEAR(m2.mean_b, 11.0 / 9, 5 * sd_of_mean(blk2.tau));
  EXPECT_GT(m2.diff, 10 * m2.diff_se);
}

TEST(KernelsBlockStats, PlantedBugsAreCaught) {
  // The same problem and seed through verify_row with test-only Ops: the correct Ops pass, a
  // residual drawn from p and a residual without the block weight fail with a p-value below
  // 1e-6 for y1 or (y1, y2).
  const Lm lm = random_lm(6, 5, 31);
  const uint64_t seed = 32;
  EXPECT_TRUE(judge(lm, simulate(lm, 3, sk::VerifyMode::block, verify_with<sk::cpu::CpuRowOps>, seed), "correct Ops").passed);
  const Verdict a = judge(lm, simulate(lm, 3, sk::VerifyMode::block, verify_with<ResidualIsPOps>, seed), "residual = p");
  EXPECT_FALSE(a.passed);
  EXPECT_LT(std::min(a.p_first, a.p_pair), 1e-6);
  const Verdict b =
      judge(lm, simulate(lm, 3, sk::VerifyMode::block, verify_with<UnweightedResidualOps>, seed), "residual without w_tau");
  EXPECT_FALSE(b.passed);
  EXPECT_LT(std::min(b.p_first, b.p_pair), 1e-6);
}
