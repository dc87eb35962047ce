#include "harness/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

namespace {
// Regularised lower incomplete gamma P(a, x) by its series (x < a + 1) and the upper
// Q(a, x) by Lentz's continued fraction otherwise; both to ~1e-14 relative.
double gamma_p_series(double a, double x) {
  double sum = 1.0 / a, term = sum;
  for (int n = 1; n < 10000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

double gamma_q_fraction(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  if (x < a + 1.0) return 1.0 - gamma_p_series(a, x);
  return gamma_q_fraction(a, x);
}
}  // namespace

double chi2_sf(double x, double df) {
  SD_CHECK(df > 0, "chi2_sf: degrees of freedom must be positive, got ", df);
  return std::clamp(gamma_q(df / 2.0, x / 2.0), 0.0, 1.0);
}

double noncentral_chi2_cdf(double x, double df, double lambda) {
  if (lambda <= 0) return 1.0 - chi2_sf(x, df);
  // Sum Poisson(j; lambda/2) * P(chi2(df + 2j) <= x) outward from the Poisson mode.
  const double half = lambda / 2.0;
  const auto mode = static_cast<int64_t>(std::floor(half));
  auto weight = [&](int64_t j) { return std::exp(-half + j * std::log(half) - std::lgamma(j + 1.0)); };
  double total = 0;
  for (int64_t j = mode; j < mode + 2000; ++j) {
    const double w = weight(j);
    total += w * (1.0 - chi2_sf(x, df + 2.0 * j));
    if (w < 1e-16 && j > mode + 10) break;
  }
  for (int64_t j = mode - 1; j >= 0; --j) {
    const double w = weight(j);
    total += w * (1.0 - chi2_sf(x, df + 2.0 * j));
    if (w < 1e-16) break;
  }
  return std::clamp(total, 0.0, 1.0);
}

double chi2_isf(double p, double df) {
  double lo = 0, hi = std::max(10.0, 10 * df);
  while (chi2_sf(hi, df) > p) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (chi2_sf(mid, df) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
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
  r.p_value = std::clamp(std::erfc(std::max(0.0, z) / std::sqrt(2.0)), 0.0, 1.0);
  return r;
}

double detectable_tv(int64_t n, int64_t bins, double significance, double power) {
  const double df = static_cast<double>(bins - 1);
  const double crit = chi2_isf(significance, df);
  // Smallest noncentrality with P(X > crit) >= power, by bisection.
  double lo = 0, hi = 1;
  while (1.0 - noncentral_chi2_cdf(crit, df, hi) < power) hi *= 2;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (1.0 - noncentral_chi2_cdf(crit, df, mid) < power ? lo : hi) = mid;
  }
  return std::sqrt(hi / (4.0 * static_cast<double>(n)));
}

}  // namespace specdec::harness::stats
