#pragma once
// Monte-Carlo checks that a speculative strategy leaves the processed target distribution
// unchanged: the exact joint law of the first three generated tokens of a tiny model, and a
// chi-square goodness-of-fit p-value (Boost.Math) of sampled triples against it.
#include <boost/math/distributions/chi_squared.hpp>

#include <array>
#include <cstdio>
#include <map>

#include "model/causal_lm.h"
#include "sampling/processors.h"
#include "strategies/common.h"

namespace specdec::test_support {

using Triple = std::array<TokenId, 3>;
using Dist = std::map<Triple, double>;

// Processed next-token distribution after `seq` with a fresh cache. returns [V]
inline at::Tensor next_probs(model::CausalLM& m, const Tokens& seq, const sampling::ProcessorConfig& proc) {
  model::KVCache cache = m.make_cache(1, static_cast<int64_t>(seq.size()) + 1);
  at::Tensor logits = strategies::forward_tokens(m, cache, seq.data(), static_cast<int64_t>(seq.size()), 0);
  return sampling::probabilities(logits.narrow(0, logits.size(0) - 1, 1), proc, seq).squeeze(0);
}

// P(x1, x2, x3 | prompt) under the processed target.
inline Dist exact_joint(model::CausalLM& m, const Tokens& prompt, const sampling::ProcessorConfig& proc) {
  Dist d;
  const at::Tensor p1 = next_probs(m, prompt, proc);
  for (TokenId a = 0; a < p1.size(0); ++a) {
    const double pa = p1[a].item<double>();
    if (pa <= 0) continue;
    Tokens s1 = prompt;
    s1.push_back(a);
    const at::Tensor p2 = next_probs(m, s1, proc);
    for (TokenId b = 0; b < p2.size(0); ++b) {
      const double pb = p2[b].item<double>();
      if (pb <= 0) continue;
      Tokens s2 = s1;
      s2.push_back(b);
      const at::Tensor p3 = next_probs(m, s2, proc);
      for (TokenId c = 0; c < p3.size(0); ++c)
        if (p3[c].item<double>() > 0) d[{a, b, c}] = pa * pb * p3[c].item<double>();
    }
  }
  return d;
}

// Chi-square goodness of fit; outcomes expected < 5 times are pooled into one cell, and
// samples outside the support count in that cell too (a sample the target can never produce
// with no pooled mass gives p = 0).
inline double chi_square_p(const Dist& exact, const std::map<Triple, int64_t>& counts, int64_t n) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int64_t n_cells = 0, n_seen = 0;
  for (const auto& [t, p] : exact) {
    const double e = p * double(n);
    auto it = counts.find(t);
    const double o = it == counts.end() ? 0.0 : double(it->second);
    n_seen += int64_t(o);
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++n_cells;
  }
  pooled_o += double(n - n_seen);
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++n_cells;
  } else if (pooled_o > 0) {
    return 0.0;
  }
  const double p = boost::math::cdf(boost::math::complement(boost::math::chi_squared(double(n_cells - 1)), stat));
  std::printf("  chi2 = %.1f, df = %lld, p = %.3g\n", stat, static_cast<long long>(n_cells - 1), p);
  return p;
}

}  // namespace specdec::test_support
