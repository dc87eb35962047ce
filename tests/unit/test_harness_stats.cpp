// Statistics against values computed by hand or from closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "harness/checks.h"
#include "harness/stats.h"

using namespace specdec;
using namespace specdec::harness;

TEST(HarnessStats, Chi2TailMatchesClosedForms) {
  // df = 2: sf(x) = exp(-x/2). df = 1: sf(x) = erfc(sqrt(x/2)).
  for (double x : {0.1, 1.0, 5.0, 20.0}) {
    EXPECT_NEAR(stats::chi2_sf(x, 2), std::exp(-x / 2), 1e-12);
    EXPECT_NEAR(stats::chi2_sf(x, 1), std::erfc(std::sqrt(x / 2)), 1e-12);
  }
  EXPECT_NEAR(stats::chi2_sf(18.307, 10), 0.05, 1e-4);  // table value
  EXPECT_NEAR(stats::chi2_isf(0.05, 10), 18.307, 1e-3);
  EXPECT_NEAR(stats::noncentral_chi2_cdf(5.0, 3, 0), 1 - stats::chi2_sf(5.0, 3), 1e-12);
}

TEST(HarnessStats, TailsKeepRelativeAccuracyAndQuantileInvertsExactly) {
  // Far tails: the old 1 - P(a, x) form lost every digit here; df = 2 has the closed form.
  EXPECT_NEAR(stats::chi2_sf(200.0, 2) / std::exp(-100.0), 1.0, 1e-12);
  for (double df : {1.0, 3.0, 10.0, 99.0})
    for (double p : {0.5, 0.05, 1e-3, 1e-9}) {
      const double x = stats::chi2_isf(p, df);
      EXPECT_NEAR(stats::chi2_sf(x, df) / p, 1.0, 1e-10) << "df " << df << " p " << p;
    }
  EXPECT_DOUBLE_EQ(stats::chi2_sf(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(stats::chi2_sf(INFINITY, 4), 0.0);
  EXPECT_DOUBLE_EQ(stats::noncentral_chi2_cdf(0.0, 4, 2.0), 0.0);
  // df = 2, lambda = 3, x = 4: the Poisson(lambda/2) mixture of chi2(2 + 2j), whose even-df
  // CDFs are finite sums, 1 - e^(-x/2) sum_{i<1+j} (x/2)^i / i!, gives 0.49356241689318
  // (summed to j = 60 in Python).
  EXPECT_NEAR(stats::noncentral_chi2_cdf(4.0, 2, 3.0), 0.49356241689318, 1e-12);
  EXPECT_GT(stats::noncentral_chi2_cdf(5.0, 2, 3.0), stats::noncentral_chi2_cdf(5.0, 2, 4.0));
  // Bad arguments name themselves.
  EXPECT_THROW(stats::chi2_sf(1.0, 0), Error);
  EXPECT_THROW(stats::chi2_sf(NAN, 3), Error);
  EXPECT_THROW(stats::chi2_isf(0.0, 3), Error);
  EXPECT_THROW(stats::noncentral_chi2_cdf(1.0, 3, -1), Error);
  EXPECT_THROW(stats::detectable_tv(0, 11, 0.005), Error);
}

TEST(HarnessStats, MedianQuantileAndLeviathan) {
  EXPECT_DOUBLE_EQ(stats::median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(stats::median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(stats::quantile({0, 10}, 0.25), 2.5);
  // alpha 0.8, gamma 4, c 0.1: (1 - 0.8^5) / (0.2 * 1.4) = 0.67232 / 0.28
  EXPECT_NEAR(stats::leviathan_speedup(0.8, 4, 0.1), 0.67232 / 0.28, 1e-12);
  EXPECT_NEAR(stats::leviathan_speedup(1.0, 4, 0.25), 5.0 / 2.0, 1e-12);
  EXPECT_NEAR(stats::leviathan_speedup(0.0, 3, 0.0), 1.0, 1e-12);
}

TEST(HarnessStats, GoodnessOfFitByHand) {
  // observed 30/20/50 vs p 0.25/0.25/0.5 at n = 100: X^2 = 25/25 + 25/25 + 0 = 2
  const auto r = stats::pearson_gof({30, 20, 50}, {0.25, 0.25, 0.5});
  EXPECT_NEAR(r.statistic, 2.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.df, 2);
  EXPECT_NEAR(r.p_value, std::exp(-1.0), 1e-12);
  const auto g = stats::g_test_gof({30, 20, 50}, {0.25, 0.25, 0.5});
  EXPECT_NEAR(g.statistic, 2 * (30 * std::log(1.2) + 20 * std::log(0.8)), 1e-12);
  // a hit in a bin of probability 0 is impossible under H0
  EXPECT_EQ(stats::pearson_gof({5, 1}, {1.0, 0.0}).p_value, 0.0);
}

TEST(HarnessStats, HomogeneityAndMannWhitney) {
  const auto same = stats::homogeneity({50, 50}, {50, 50});
  EXPECT_NEAR(same.statistic, 0, 1e-12);
  EXPECT_NEAR(same.p_value, 1, 1e-12);
  // 2x2 table [[60, 40], [40, 60]]: X^2 = 4 * 10^2 / 50 = 8
  const auto diff = stats::homogeneity({60, 40}, {40, 60});
  EXPECT_NEAR(diff.statistic, 8.0, 1e-12);
  EXPECT_NEAR(diff.p_value, std::erfc(std::sqrt(4.0)), 1e-12);
  std::vector<double> a, b, c;
  Rng rng(1);
  for (int i = 0; i < 200; ++i) {
    a.push_back(rng.uniform());
    b.push_back(rng.uniform());
    c.push_back(rng.uniform() + 0.3);
  }
  EXPECT_GT(stats::mann_whitney(a, b).p_value, 0.01);
  EXPECT_LT(stats::mann_whitney(a, c).p_value, 1e-6);
  EXPECT_DOUBLE_EQ(stats::mann_whitney({1, 1}, {1, 1}).p_value, 1.0);  // all tied
  // By hand: a = {1, 2}, b = {3, 4, 5}: U = 0, mean 3, var 2*3*6/12 = 3, z = (3 - 0.5)/sqrt(3);
  // two-sided p = erfc(z / sqrt(2)).
  EXPECT_NEAR(stats::mann_whitney({1, 2}, {3, 4, 5}).p_value, std::erfc(2.5 / std::sqrt(6.0)), 1e-14);
}

TEST(HarnessStats, DetectableTvShrinksLikeOneOverSqrtN) {
  const double tv1 = stats::detectable_tv(400, 11, 0.005);
  const double tv4 = stats::detectable_tv(1600, 11, 0.005);
  EXPECT_NEAR(tv1 / tv4, 2.0, 1e-6);
  // Reference values from scipy.stats.ncx2 (80% power): N=300 -> 0.143, N=2000 -> 0.055.
  EXPECT_NEAR(stats::detectable_tv(300, 11, 0.005), 0.143, 0.002);
  EXPECT_NEAR(stats::detectable_tv(2000, 11, 0.005), 0.055, 0.002);
  // Exactly the defining equation: at lambda = 4 n TV^2 the test's power is 0.8.
  for (double power : {0.5, 0.8, 0.95}) {
    const double tv = stats::detectable_tv(300, 11, 0.005, power);
    const double crit = stats::chi2_isf(0.005, 10);
    EXPECT_NEAR(1 - stats::noncentral_chi2_cdf(crit, 10, 4 * 300 * tv * tv), power, 1e-9);
  }
}

namespace {
std::vector<TokenId> draw(const std::vector<double>& p, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<TokenId> out;
  for (int64_t i = 0; i < n; ++i) {
    double u = rng.uniform(), acc = 0;
    TokenId t = static_cast<TokenId>(p.size() - 1);
    for (size_t j = 0; j < p.size(); ++j) {
      acc += p[j];
      if (u < acc) {
        t = static_cast<TokenId>(j);
        break;
      }
    }
    out.push_back(t);
  }
  return out;
}
}  // namespace

TEST(HarnessChecks, FirstTokenPassesOnTargetAndFailsOnShiftedDistribution) {
  const std::vector<double> p = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02};
  const auto good = first_token_check(p, draw(p, 2000, 7), 4, 0.01);
  EXPECT_TRUE(good.pass) << good.detail;
  std::vector<double> q = p;  // 8% of mass moved from the top token to the tail: TV 0.08
  q[0] -= 0.08;
  q[6] += 0.08;
  const auto bad = first_token_check(p, draw(q, 2000, 7), 4, 0.01);
  EXPECT_FALSE(bad.pass) << bad.detail;
  EXPECT_LT(bad.detectable_tv, 0.08);  // the stated power covers this shift
}

// A peaked distribution, as at low temperature on a real model: one draw of a token with
// expected count 0.006 must not fail the test (Pearson's statistic alone would be ~160 for
// it); tokens with N p < 5 are pooled.
TEST(HarnessChecks, FirstTokenPoolsBinsWithSmallExpectedCounts) {
  const std::vector<double> p = {0.97, 0.02, 0.005, 0.003, 0.00199, 0.00001};
  std::vector<TokenId> draws;
  for (auto [tok, count] : std::vector<std::pair<TokenId, int>>{{0, 582}, {1, 12}, {2, 3}, {3, 2}, {5, 1}})
    draws.insert(draws.end(), count, tok);
  const auto out = first_token_check(p, draws, 10, 0.01);
  EXPECT_TRUE(out.pass) << out.detail;
  EXPECT_GT(out.p_value, 0.5) << out.detail;  // the counts are what p predicts
  EXPECT_NE(out.detail.find("bins 3"), std::string::npos) << out.detail;
  // The same counts with the rare token drawn 30 times instead of token 0 do fail.
  draws.erase(draws.begin(), draws.begin() + 30);
  draws.insert(draws.end(), 30, 5);
  EXPECT_FALSE(first_token_check(p, draws, 10, 0.01).pass);
  // One token with all but 0.1% of the mass: nothing to test with 150 samples, said so.
  const auto flat = first_token_check({0.999, 0.001}, std::vector<TokenId>(150, 0), 10, 0.01);
  EXPECT_TRUE(flat.pass);
  EXPECT_NE(flat.detail.find("not testable"), std::string::npos) << flat.detail;
}

TEST(HarnessChecks, SequenceTestDetectsADifferentSampler) {
  const std::vector<double> p = {0.5, 0.3, 0.2}, q = {0.3, 0.3, 0.4};
  auto seqs = [](const std::vector<double>& d, uint64_t seed) {
    std::vector<Tokens> out;
    const auto a = draw(d, 900, seed);
    for (size_t i = 0; i < 300; ++i) out.push_back({a[3 * i], a[3 * i + 1], a[3 * i + 2]});
    return out;
  };
  auto ll = [&](const std::vector<Tokens>& s) {
    std::vector<double> out;
    for (const auto& t : s) out.push_back(std::log(p[t[0]]) + std::log(p[t[1]]) + std::log(p[t[2]]));
    return out;
  };
  const auto a = seqs(p, 1), b = seqs(p, 2), c = seqs(q, 3);
  EXPECT_TRUE(sequence_check(a, b, ll(a), ll(b), 3, 0.01).pass);
  const auto bad = sequence_check(a, c, ll(a), ll(c), 3, 0.01);
  EXPECT_FALSE(bad.pass) << bad.detail;
}

TEST(HarnessChecks, GreedyEqualityNamesPromptAndPosition) {
  const auto ok = greedy_equality_check({"p0", "p1"}, {{1, 2, 3}, {4}}, {{1, 2, 3}, {4}});
  EXPECT_TRUE(ok.pass);
  EXPECT_NE(ok.detail.find("100.0%"), std::string::npos);
  const auto bad = greedy_equality_check({"p0", "p1"}, {{1, 2, 3}, {4}}, {{1, 2, 3}, {5, 6}});
  EXPECT_FALSE(bad.pass);
  EXPECT_NE(bad.detail.find("50.0%"), std::string::npos) << bad.detail;
  EXPECT_NE(bad.detail.find("prompt p1 differs at position 0 (baseline 4, candidate 5)"), std::string::npos)
      << bad.detail;
}
