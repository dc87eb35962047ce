#pragma once
// Statistics for the harness: summaries over repeats, the Leviathan et al. speedup model,
// and the hypothesis tests of the distribution checks. Plain doubles, no LibTorch.
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::harness::stats {

double median(std::vector<double> v);
double quantile(std::vector<double> v, double q);  // linear interpolation, q in [0, 1]

// Leviathan et al. (2023), eq. for expected walltime improvement with draft length gamma,
// acceptance rate alpha and cost ratio c = draft step / target step:
//   (1 - alpha^(gamma+1)) / ((1 - alpha) * (gamma*c + 1)); the alpha -> 1 limit is
//   (gamma + 1) / (gamma*c + 1).
double leviathan_speedup(double alpha, int64_t gamma, double c);

// Upper tail of the chi-square distribution: P(X >= x), X ~ chi2(df).
double chi2_sf(double x, double df);
// P(X <= x) for X ~ noncentral chi2(df, lambda) (Poisson mixture of central chi-squares).
double noncentral_chi2_cdf(double x, double df, double lambda);
// Quantile of the central chi-square: the x with chi2_sf(x, df) = p.
double chi2_isf(double p, double df);

struct TestResult {
  std::string name;
  double statistic = 0;
  double df = 0;
  double p_value = 1;
  bool pass = true;
  std::string detail;
};

// Observed counts vs expected probabilities (same bins; probabilities sum to ~1).
// Pearson's X^2 and the G statistic 2*sum(o*ln(o/e)), both with df = bins - 1.
TestResult pearson_gof(const std::vector<int64_t>& observed, const std::vector<double>& expected_p);
TestResult g_test_gof(const std::vector<int64_t>& observed, const std::vector<double>& expected_p);

// Two samples' counts over the same bins: chi-square test of homogeneity (2 x K table);
// bins empty in both samples are dropped.
TestResult homogeneity(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// Mann-Whitney U two-sample test (normal approximation with tie correction), two-sided.
TestResult mann_whitney(const std::vector<double>& a, const std::vector<double>& b);

// The smallest total-variation distance between the true and the expected distribution
// that a chi-square goodness-of-fit test with n samples over `bins` bins detects with
// probability `power` at level `significance`. Uses lambda >= 4 n TV^2 (Cauchy-Schwarz on
// sum (p_i - q_i)^2 / q_i), so it is an upper bound on the detectable TV.
double detectable_tv(int64_t n, int64_t bins, double significance, double power = 0.8);

}  // namespace specdec::harness::stats
