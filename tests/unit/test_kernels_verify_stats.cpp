// Monte-Carlo check that verification composed with drafting reproduces the target
// distribution p (the losslessness of speculative sampling, Leviathan et al. 2023, Thm. 1),
// and that the same check fails when the residual is deliberately wrong.
//
// Setup: vocab 8-16, random p_i and q_i with zero corners (q = 0 where p > 0 and p = 0
// where q > 0), independent of the prefix, gamma in {1, 3, 5}. Per step x_i ~ q_i, then
// verify_cpu. Given that position j is emitted, out[j] must follow p_j.
// Pass criteria (fixed seeds, so the outcome is deterministic; the statistics live in
// tests/support/kernel_stats.h):
//   * Pearson chi-square (Boost.Math's chi-square law, no pooling) of out[0] against p_0 at
//     N = 1e5: p-value > 1e-3, and of every later position j against p_j: p-value
//     > 1e-3 / (gamma + 1) (Bonferroni);
//     categories with p = 0 must never occur;
//   * total-variation distance TV(N) of out[0] at N = 1e3, 3e3, 1e4, 3e4, 1e5 stays within
//     [0.25, 2.5] x E[TV(N)] ~= sum_k sqrt(p_k (1 - p_k) / (2 pi N)), i.e. it shrinks as
//     1/sqrt(N) over two decades; a biased sampler plateaus and leaves the band.
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
#include "tests/support/kernel_stats.h"

namespace test_kernels_verify_stats {  // this file's own names (its tests compile in a batch with others)

namespace sk = specdec::kernels;
namespace math = specdec::kernels::math;

namespace ts = specdec::test_support;
using ts::chi_square;
using ts::draw;
using ts::Fit;

// ---- problems --------------------------------------------------------------------------------

struct Problem {
  int64_t gamma = 0, vocab = 0;
  std::vector<float> q;  // [gamma, V]
  std::vector<float> p;  // [gamma+1, V]
};

// Random rows with zero corners: about 1/4 of q and 1/8 of p entries are 0.
Problem make_problem(int64_t gamma, int64_t vocab, uint64_t seed) {
  specdec::Rng rng(seed);
  Problem pr{gamma, vocab, std::vector<float>(gamma * vocab), std::vector<float>((gamma + 1) * vocab)};
  for (int64_t i = 0; i < gamma; ++i) ts::fill_random_row(rng, pr.q.data() + i * vocab, vocab, 0.25, 1e-3);
  for (int64_t i = 0; i <= gamma; ++i) ts::fill_random_row(rng, pr.p.data() + i * vocab, vocab, 0.125, 1e-3);
  return pr;
}

// Distribution the output should follow: the float row of p, normalised in double.
std::vector<double> target_row(const Problem& pr, int64_t i) {
  return ts::normalised(pr.p.data() + i * pr.vocab, pr.vocab);
}

// ---- simulation ----------------------------------------------------------------------------

using VerifyFn = std::function<void(const sk::VerifyArgs&)>;

struct Simulation {
  std::vector<std::vector<int64_t>> counts;  // [gamma+1][V] emitted out[j]
  std::vector<double> tv_ratio;              // TV(N) / E[TV(N)] of out[0] at the checkpoints
};

const std::vector<int64_t> kCheckpoints = {1000, 3000, 10000, 30000, 100000};

Simulation simulate(const Problem& pr, sk::VerifyMode mode, const VerifyFn& verify, uint64_t seed) {
  const int64_t B = 1000, G = pr.gamma, Vn = pr.vocab;
  specdec::Rng rng(seed);
  // Every sequence in the batch sees the same p and q (they do not depend on the prefix).
  std::vector<float> q(B * G * Vn), p(B * (G + 1) * Vn);
  std::vector<double> u(B * (G + 1));
  for (int64_t b = 0; b < B; ++b) {
    std::copy(pr.q.begin(), pr.q.end(), q.begin() + b * G * Vn);
    std::copy(pr.p.begin(), pr.p.end(), p.begin() + b * (G + 1) * Vn);
  }
  std::vector<int32_t> draft(B * G), n_draft(B, static_cast<int32_t>(G)), n_acc(B), out(B * (G + 1));
  Simulation sim;
  sim.counts.assign(G + 1, std::vector<int64_t>(Vn, 0));
  const std::vector<double> p0 = target_row(pr, 0);
  int64_t n = 0;
  size_t next_checkpoint = 0;
  while (n < kCheckpoints.back()) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < G; ++i) draft[b * G + i] = draw(pr.q.data() + i * Vn, Vn, rng.uniform());
    for (auto& x : u) x = rng.uniform();
    sk::VerifyArgs a;
    a.batch = B, a.gamma = G, a.vocab = Vn, a.mode = mode;
    a.draft_tokens = draft.data(), a.n_draft = n_draft.data(), a.q = q.data(), a.p = p.data();
    a.uniforms = u.data(), a.n_accepted = n_acc.data(), a.out_tokens = out.data();
    verify(a);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j <= G && out[b * (G + 1) + j] >= 0; ++j) sim.counts[j][out[b * (G + 1) + j]]++;
      if (++n == kCheckpoints[next_checkpoint]) {
        sim.tv_ratio.push_back(ts::tv_point(sim.counts[0], p0, n).to_mean);
        ++next_checkpoint;
      }
    }
  }
  return sim;
}

struct Verdict {
  bool passed = true;
  double min_p_value = 1.0;  // over positions, before the Bonferroni factor
  double p0_value = 1.0;
  double last_tv_ratio = 0.0;
};

Verdict judge(const Problem& pr, const Simulation& sim) {
  Verdict v;
  for (int64_t j = 0; j <= pr.gamma; ++j) {
    const Fit f = chi_square(sim.counts[j], target_row(pr, j), 0.0);  // no pooling
    const double alpha = j == 0 ? 1e-3 : 1e-3 / (pr.gamma + 1);
    v.passed &= !f.impossible_seen && f.p_value > alpha;
    v.min_p_value = std::min(v.min_p_value, f.p_value);
    if (j == 0) v.p0_value = f.p_value;
  }
  for (double r : sim.tv_ratio) v.passed &= r >= 0.25 && r <= 2.5;
  v.last_tv_ratio = sim.tv_ratio.back();
  std::printf("  gamma %ld V %ld: p-value(out[0]) %.3g, min over positions %.3g, TV/E[TV] at N=1e3..1e5:",
              static_cast<long>(pr.gamma), static_cast<long>(pr.vocab), v.p0_value, v.min_p_value);
  for (double r : sim.tv_ratio) std::printf(" %.2f", r);
  std::printf(" -> %s\n", v.passed ? "pass" : "FAIL");
  return v;
}

void verify_with_cpu(const sk::VerifyArgs& a) { sk::verify_cpu(a); }

// The planted bug: at a rejection, resample from p instead of norm(max(0, p - q)).
struct ResidualIsPOps : specdec::kernels::cpu::CpuRowOps {
  template <class T>
  int64_t sample(const T* p, const float*, int64_t n, float u, double = 1.0) const {
    return CpuRowOps::sample(p, nullptr, n, u);
  }
};

void verify_with_wrong_residual(const sk::VerifyArgs& a) {
  for (int64_t b = 0; b < a.batch; ++b) {
    const math::RowView row = math::row_view(a, b);
    ResidualIsPOps ops;
    const math::RowResult r = math::verify_row(row, ops);
    a.n_accepted[b] = r.n_accepted;
    math::write_row_output(row, r, a.out_tokens + b * (a.gamma + 1));
  }
}

TEST(KernelsVerifyStats, ChiSquarePValueMatchesTables) {
  // Critical values from standard chi-square tables.
  EXPECT_NEAR(ts::chi_square_sf(1, 3.841), 0.05, 1e-4);    // df 1, 5 %
  EXPECT_NEAR(ts::chi_square_sf(10, 18.307), 0.05, 1e-4);  // df 10, 5 %
  EXPECT_NEAR(ts::chi_square_sf(15, 30.578), 0.01, 1e-4);  // df 15, 1 %
  EXPECT_NEAR(ts::chi_square_sf(2, 0.4), std::exp(-0.2), 1e-12);
  // The fits here pool nothing: cells expected 0.04 and 3.96 times both count (df 1), where
  // the default (expected < 5 pooled) leaves one cell and p-value 1.
  EXPECT_NEAR(chi_square({0, 4}, {0.01, 0.99}, 0.0).p_value, ts::chi_square_sf(1, 0.04 + 0.04 * 0.04 / 3.96), 1e-12);
  EXPECT_EQ(chi_square({0, 4}, {0.01, 0.99}).p_value, 1.0);
}

class SamplingPreservesTarget : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(SamplingPreservesTarget, ChiSquareAndRootNShrink) {
  const auto [gamma, vocab] = GetParam();
  const Problem pr = make_problem(gamma, vocab, 1000 + gamma);
  const Simulation sim = simulate(pr, sk::VerifyMode::sampling, verify_with_cpu, 77 + gamma);
  const Verdict v = judge(pr, sim);
  EXPECT_TRUE(v.passed) << "min p-value " << v.min_p_value << ", TV/E[TV] at N = 1e3..1e5: "
                        << ::testing::PrintToString(sim.tv_ratio);
}

INSTANTIATE_TEST_SUITE_P(KernelsVerifyStats, SamplingPreservesTarget,
                         ::testing::Values(std::make_tuple(1, 8), std::make_tuple(3, 12), std::make_tuple(5, 16)));

TEST(KernelsVerifyStats, TokensOnlyDraftPreservesTarget) {
  // n-gram drafts come from anywhere; here from q, which the verifier never sees.
  const Problem pr = make_problem(3, 10, 2024);
  const Simulation sim = simulate(pr, sk::VerifyMode::tokens_only, verify_with_cpu, 99);
  const Verdict v = judge(pr, sim);
  EXPECT_TRUE(v.passed) << "min p-value " << v.min_p_value << ", TV/E[TV] "
                        << ::testing::PrintToString(sim.tv_ratio);
}

TEST(KernelsVerifyStats, PlantedWrongResidualIsCaught) {
  // Same problem and seed as the gamma = 3 case above, but the residual is p. The checks
  // must fail decisively: p-value < 1e-10 and TV far outside the 1/sqrt(N) band at N = 1e5.
  const Problem pr = make_problem(3, 12, 1003);
  const Simulation sim = simulate(pr, sk::VerifyMode::sampling, verify_with_wrong_residual, 80);
  const Verdict v = judge(pr, sim);
  EXPECT_FALSE(v.passed);
  EXPECT_LT(v.p0_value, 1e-10);
  EXPECT_GT(v.last_tv_ratio, 5.0) << ::testing::PrintToString(sim.tv_ratio);
  // And the correct kernel passes on exactly this problem and seed.
  EXPECT_TRUE(judge(pr, simulate(pr, sk::VerifyMode::sampling, verify_with_cpu, 80)).passed);
}

}  // namespace test_kernels_verify_stats
