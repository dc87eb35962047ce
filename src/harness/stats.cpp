#include "harness/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/non_central_chi_squared.hpp>
#include <boost/math/distributions/normal.hpp>

#include "core/error.h"

namespace specdec::harness::stats {

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double leviathan_speedup(double alpha, int64_t gamma, double c) {
  const double g = static_cast<double>(gamma);
  if (alpha >= 1.0 - 1e-12) return (g + 1.0) / (g * c + 1.0);
  return (1.0 - std::pow(alpha, g + 1.0)) / ((1.0 - alpha) * (g * c + 1.0));
}

// The distributions are Boost.Math's (complements computed directly, so small tail
// probabilities keep their relative accuracy). Boost's default policy throws on a domain
// error; the SD_CHECKs below name the bad argument first.
namespace bm = boost::math;

double chi2_sf(double x, double df) {
  SD_CHECK(df > 0 && std::isfinite(df), "chi2_sf: degrees of freedom must be positive, got ", df);
  SD_CHECK(!std::isnan(x), "chi2_sf: statistic is NaN");
  if (x <= 0) return 1.0;
  if (std::isinf(x)) return 0.0;
  return bm::cdf(bm::complement(bm::chi_squared(df), x));
}

double noncentral_chi2_cdf(double x, double df, double lambda) {
  SD_CHECK(df > 0 && std::isfinite(df), "noncentral_chi2_cdf: degrees of freedom must be positive, got ",
           df);
  SD_CHECK(lambda >= 0 && std::isfinite(lambda), "noncentral_chi2_cdf: noncentrality must be >= 0, got ",
           lambda);
  SD_CHECK(!std::isnan(x), "noncentral_chi2_cdf: x is NaN");
  if (x <= 0) return 0.0;
  if (std::isinf(x)) return 1.0;
  if (lambda == 0) return bm::cdf(bm::chi_squared(df), x);
  return bm::cdf(bm::non_central_chi_squared(df, lambda), x);
}

double chi2_isf(double p, double df) {
  SD_CHECK(df > 0 && std::isfinite(df), "chi2_isf: degrees of freedom must be positive, got ", df);
  SD_CHECK(p > 0 && p < 1, "chi2_isf: tail probability must be in (0, 1), got ", p);
  return bm::quantile(bm::complement(bm::chi_squared(df), p));
}

namespace {
void check_bins(const std::vector<int64_t>& observed, const std::vector<double>& expected_p) {
  SD_CHECK(observed.size() == expected_p.size() && observed.size() >= 2,
           "goodness of fit: need >= 2 bins of observed and expected, got ", observed.size(), " and ",
           expected_p.size());
}
}  // namespace

TestResult pearson_gof(const std::vector<int64_t>& observed, const std::vector<double>& expected_p) {
  check_bins(observed, expected_p);
  const double n = static_cast<double>(std::accumulate(observed.begin(), observed.end(), int64_t{0}));
  TestResult r{"chi-square GoF", 0, static_cast<double>(observed.size() - 1), 1, true, ""};
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = n * expected_p[i];
    if (e <= 0) {
      // A bin the target gives probability 0 but the sample hit: impossible under H0.
      if (observed[i] > 0) r.statistic = INFINITY;
      continue;
    }
    r.statistic += (observed[i] - e) * (observed[i] - e) / e;
  }
  r.p_value = std::isinf(r.statistic) ? 0.0 : chi2_sf(r.statistic, r.df);
  return r;
}

TestResult g_test_gof(const std::vector<int64_t>& observed, const std::vector<double>& expected_p) {
  check_bins(observed, expected_p);
  const double n = static_cast<double>(std::accumulate(observed.begin(), observed.end(), int64_t{0}));
  TestResult r{"G-test GoF", 0, static_cast<double>(observed.size() - 1), 1, true, ""};
  for (size_t i = 0; i < observed.size(); ++i) {
    if (observed[i] == 0) continue;
    const double e = n * expected_p[i];
    if (e <= 0) {
      r.statistic = INFINITY;
      break;
    }
    r.statistic += 2.0 * observed[i] * std::log(observed[i] / e);
  }
  r.p_value = std::isinf(r.statistic) ? 0.0 : chi2_sf(std::max(0.0, r.statistic), r.df);
  return r;
}

TestResult homogeneity(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  SD_CHECK(a.size() == b.size(), "homogeneity: bin counts differ: ", a.size(), " vs ", b.size());
  const double na = static_cast<double>(std::accumulate(a.begin(), a.end(), int64_t{0}));
  const double nb = static_cast<double>(std::accumulate(b.begin(), b.end(), int64_t{0}));
  TestResult r{"chi-square homogeneity", 0, 0, 1, true, ""};
  if (na == 0 || nb == 0) return r;
  int64_t k = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double col = static_cast<double>(a[i] + b[i]);
    if (col == 0) continue;
    ++k;
    const double ea = col * na / (na + nb), eb = col * nb / (na + nb);
    r.statistic += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
  }
  r.df = static_cast<double>(k - 1);
  r.p_value = k < 2 ? 1.0 : chi2_sf(r.statistic, r.df);
  return r;
}

TestResult mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  TestResult r{"Mann-Whitney U", 0, 0, 1, true, ""};
  const size_t na = a.size(), nb = b.size(), n = na + nb;
  if (na == 0 || nb == 0) return r;
  std::vector<std::pair<double, int>> all;
  for (double x : a) all.push_back({x, 0});
  for (double x : b) all.push_back({x, 1});
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  double rank_sum_a = 0, tie_term = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t q = i; q < j; ++q)
      if (all[q].second == 0) rank_sum_a += avg_rank;
    i = j;
  }
  const double u = rank_sum_a - na * (na + 1.0) / 2.0;
  const double mean = na * nb / 2.0;
  const double var = na * nb / 12.0 * ((n + 1.0) - tie_term / (double(n) * (n - 1.0)));
  r.statistic = u;
  if (var <= 0) return r;  // all values tied: no evidence of a difference
  const double z = (std::fabs(u - mean) - 0.5) / std::sqrt(var);  // continuity correction
  // Two-sided: 2 P(Z > z) for Z ~ N(0, 1).
  r.p_value = std::min(1.0, 2.0 * bm::cdf(bm::complement(bm::normal(), std::max(0.0, z))));
  return r;
}

double detectable_tv(int64_t n, int64_t bins, double significance, double power) {
  SD_CHECK(n > 0, "detectable_tv: sample count must be positive, got ", n);
  SD_CHECK(bins >= 2, "detectable_tv: need >= 2 bins, got ", bins);
  SD_CHECK(power > significance && power < 1, "detectable_tv: power must be in (significance, 1), got ",
           power);
  const double df = static_cast<double>(bins - 1);
  const double crit = chi2_isf(significance, df);
  // Smallest noncentrality with P(X > crit) >= power: Boost solves for it (the power rises
  // monotonically with lambda).
  const double lambda = bm::non_central_chi_squared::find_non_centrality(df, crit, 1.0 - power);
  return std::sqrt(lambda / (4.0 * static_cast<double>(n)));
}

}  // namespace specdec::harness::stats
