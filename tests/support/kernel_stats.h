#pragma once
// Statistics and toy models for the kernel Monte-Carlo tests (tests/unit/test_kernels_*_stats.cpp):
// Pearson chi-square with pooling (Boost.Math's chi-square law), total-variation distance
// against its expectation and its 1/sqrt(N) bound, random rows with zero corners, an
// inverse-CDF draw, and a pair of small Markov "language models" with the laws of the first
// two emitted tokens (y1, y2).
#include <boost/math/distributions/chi_squared.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/rng.h"

namespace specdec::test_support {

// ---- chi-square -------------------------------------------------------------------------------

// P(X > stat) for X ~ chi-square with df degrees of freedom.
inline double chi_square_sf(double df, double stat) {
  return boost::math::cdf(boost::math::complement(boost::math::chi_squared(df), stat));
}

// x with P(X <= x) = prob for X ~ chi-square with df degrees of freedom.
inline double chi_square_quantile(double df, double prob) {
  return boost::math::quantile(boost::math::chi_squared(df), prob);
}

struct Fit {
  double p_value = 1.0;
  bool impossible_seen = false;  // a category of probability 0 occurred
};

// Pearson chi-square of counts against probabilities. Categories of probability 0 are excluded
// and must stay empty; categories with expected count < min_expected are pooled into one cell
// (the chi-square approximation needs about 5; 0 pools nothing). df = cells - 1; fewer than
// two cells give p-value 1.
inline Fit chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs,
                      double min_expected = 5.0) {
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
    } else if (e < min_expected) {
      pooled_e += e, pooled_c += counts[k];
    } else {
      stat += (counts[k] - e) * (counts[k] - e) / e, ++n_cells;
    }
  }
  if (pooled_e > 0) stat += (pooled_c - pooled_e) * (pooled_c - pooled_e) / pooled_e, ++n_cells;
  if (n_cells > 1) f.p_value = chi_square_sf(n_cells - 1, stat);
  return f;
}

// ---- total variation ----------------------------------------------------------------------------

// TV of the empirical law at n draws relative to E[TV] ~= sum_k sqrt(p_k (1 - p_k) / (2 pi n))
// (E|p_hat - p| per category, normal approximation) and to the bound
// B(n) = sqrt(chi2_{k-1}(1 - 1e-3) / n) / 2 (k categories of positive probability): by
// Cauchy-Schwarz TV <= sqrt(X^2 / n) / 2 for Pearson's X^2, which exceeds that quantile with
// probability ~1e-3 when the law is right.
struct TvPoint {
  double to_mean = 0, to_bound = 0;  // TV / E[TV], TV / B(n)
};

inline TvPoint tv_point(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double tv = 0, expected = 0;
  int k = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    tv += std::fabs(double(counts[c]) / n - probs[c]) / 2;
    expected += std::sqrt(2 * probs[c] * (1 - probs[c]) / (M_PI * n)) / 2;
    k += probs[c] > 0;
  }
  const double q = chi_square_quantile(std::max(k - 1, 1), 1 - 1e-3);
  return {tv / expected, tv / (0.5 * std::sqrt(q / n))};
}

inline void print_tv_points(const std::vector<TvPoint>& points) {
  for (const TvPoint& t : points) std::printf(" %.2f (%.2f)", t.to_mean, t.to_bound);
}

// ---- rows -------------------------------------------------------------------------------------

// A random probability row with zero corners: each entry is 0 with probability zero_frac,
// else u^2 + floor; normalised in double (an all-zero row becomes one-hot at 0).
inline void fill_random_row(specdec::Rng& rng, float* row, int64_t vocab, double zero_frac, double floor) {
  std::vector<double> w(vocab);
  double s = 0;
  for (auto& x : w) s += (x = rng.uniform() < zero_frac ? 0.0 : std::pow(rng.uniform(), 2.0) + floor);
  if (s == 0) s = w[0] = 1;
  for (int64_t k = 0; k < vocab; ++k) row[k] = static_cast<float>(w[k] / s);
}

// A float row as a law in double.
inline std::vector<double> normalised(const float* row, int64_t n) {
  std::vector<double> r(row, row + n);
  double s = 0;
  for (double x : r) s += x;
  for (double& x : r) x /= s;
  return r;
}

// x ~ row by a plain inverse CDF (independent of the kernels' sampler).
inline int32_t draw(const float* row, int64_t vocab, double u) {
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

// ---- a pair of Markov language models -----------------------------------------------------------

// Target p and draft q rows depend on the position and the previous token (context V = the
// start of the text).
struct MarkovLm {
  int64_t vocab = 0, n_pos = 0;
  std::vector<float> tgt, dft;  // [n_pos, V+1, V] each
  const float* p(int64_t pos, int32_t ctx) const { return tgt.data() + (pos * (vocab + 1) + ctx) * vocab; }
  const float* q(int64_t pos, int32_t ctx) const { return dft.data() + (pos * (vocab + 1) + ctx) * vocab; }
};

// Random rows with zero corners: about 1/4 of q and 1/8 of p entries are 0.
inline MarkovLm random_lm(int64_t vocab, int64_t n_pos, uint64_t seed) {
  specdec::Rng rng(seed);
  MarkovLm lm{vocab, n_pos, std::vector<float>(n_pos * (vocab + 1) * vocab),
              std::vector<float>(n_pos * (vocab + 1) * vocab)};
  for (int64_t r = 0; r < n_pos * (vocab + 1); ++r) {
    fill_random_row(rng, lm.dft.data() + r * vocab, vocab, 0.25, 1e-2);
    fill_random_row(rng, lm.tgt.data() + r * vocab, vocab, 0.125, 1e-2);
  }
  return lm;
}

// Law of y1: p(. | start).
inline std::vector<double> first_law(const MarkovLm& lm) { return normalised(lm.p(0, lm.vocab), lm.vocab); }

// Law of (y1, y2): p(y1 | start) p(y2 | y1), as [V * V].
inline std::vector<double> pair_law(const MarkovLm& lm) {
  const std::vector<double> first = first_law(lm);
  std::vector<double> law(lm.vocab * lm.vocab);
  for (int32_t a = 0; a < lm.vocab; ++a) {
    const std::vector<double> next = normalised(lm.p(1, a), lm.vocab);
    for (int32_t b = 0; b < lm.vocab; ++b) law[a * lm.vocab + b] = first[a] * next[b];
  }
  return law;
}

// Counts of y1 and (y1, y2) over trials, with the TV points at the checkpoints
// N = 1e3, 1e4, 1e5 (the last is the number of trials).
inline const std::vector<int64_t> kTwoLawCheckpoints = {1000, 10000, 100000};

struct TwoLawCounts {
  std::vector<int64_t> first, pair;        // [V], [V*V]
  std::vector<TvPoint> tv_first, tv_pair;  // at the checkpoints
  explicit TwoLawCounts(int64_t vocab = 0) : first(vocab), pair(vocab * vocab) {}
};

// One batched round of speculative decoding: n_accepted [B] and out_tokens [B, stride].
struct RoundOutput {
  std::vector<int32_t> n_acc, out;
};

// Runs the trials in batches of `batch` into c. One trial: round(0, ctx) is a round from the
// start (ctx[b] = V); y1 is its first emitted token and y2 its second, or, when it emitted only
// one token, the first token of round(1, ctx) with ctx = those y1 (one call for the batch).
// on_first(n_accepted) sees every trial's first round, in order.
template <class RoundFn, class OnFirst>
void run_two_law_trials(const MarkovLm& lm, int64_t batch, int64_t stride, TwoLawCounts& c, RoundFn&& round,
                        OnFirst&& on_first) {
  const int64_t Vn = lm.vocab;
  const std::vector<double> law1 = first_law(lm), law2 = pair_law(lm);
  for (int64_t n = 0; n < kTwoLawCheckpoints.back();) {
    const RoundOutput r1 = round(0, std::vector<int32_t>(batch, static_cast<int32_t>(Vn)));
    std::vector<int32_t> again;  // first tokens of trials that need a second round
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t* out = r1.out.data() + b * stride;
      c.first[out[0]]++;
      on_first(r1.n_acc[b]);
      if (r1.n_acc[b] >= 1) c.pair[out[0] * Vn + out[1]]++;
      else again.push_back(out[0]);
    }
    if (!again.empty()) {
      const RoundOutput r2 = round(1, again);
      for (size_t k = 0; k < again.size(); ++k) c.pair[again[k] * Vn + r2.out[k * stride]]++;
    }
    n += batch;
    for (int64_t cp : kTwoLawCheckpoints)
      if (n == cp) {
        c.tv_first.push_back(tv_point(c.first, law1, n));
        c.tv_pair.push_back(tv_point(c.pair, law2, n));
      }
  }
}

struct TwoLawVerdict {
  bool passed = true;
  double p_first = 1, p_pair = 1;
};

// Pass: p-value > 1e-3 for both laws, no token of target probability 0, and TV <= B(N) at
// every checkpoint. Prints `head` then the p-values and TV points.
inline TwoLawVerdict judge_two_laws(const MarkovLm& lm, const TwoLawCounts& c, const char* head) {
  const Fit f1 = chi_square(c.first, first_law(lm)), f2 = chi_square(c.pair, pair_law(lm));
  TwoLawVerdict v;
  v.p_first = f1.p_value, v.p_pair = f2.p_value;
  v.passed = f1.p_value > 1e-3 && f2.p_value > 1e-3 && !f1.impossible_seen && !f2.impossible_seen;
  for (const auto* tv : {&c.tv_first, &c.tv_pair})
    for (const TvPoint& t : *tv) v.passed &= t.to_bound <= 1.0;
  std::printf("%s p-value y1 %.3g, (y1,y2) %.3g; N = 1e3, 1e4, 1e5: TV/E[TV] (TV/B) y1", head, v.p_first, v.p_pair);
  print_tv_points(c.tv_first);
  std::printf(", (y1,y2)");
  print_tv_points(c.tv_pair);
  std::printf(" -> %s\n", v.passed ? "pass" : "FAIL");
  return v;
}

}  // namespace specdec::test_support
