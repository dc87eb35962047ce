// Speculative sampling preserves the processed target distribution (Leviathan et al. 2023,
// Chen et al. 2023), checked by Monte Carlo on tiny random models (vocab 32) with a real
// draft model: the empirical joint distribution of the first 3 generated tokens is compared
// with the target's exact processed distribution by a chi-square test at p = 0.001.
// Power: N = 20000 samples; the same test must reject (a) 2%-total-variation perturbations of
// the exact distribution and (b) speculative sampling with a broken residual.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

#include "core/rng.h"
#include "model/tiny.h"
#include "strategies/common.h"
#include "strategies/registry.h"

using namespace specdec;
using namespace specdec::strategies;

namespace {

using Triple = std::array<TokenId, 3>;
using Dist = std::map<Triple, double>;

constexpr int64_t kSamples = 20000;
constexpr double kPValue = 1e-3;
const Tokens kPrompt = {1, 2, 3};

sampling::ProcessorConfig proc() {
  sampling::ProcessorConfig c;
  c.temperature = 0.7;
  c.top_k = 6;
  return c;
}
Params proc_params() { return Params({{"temperature", "0.7"}, {"top_k", "6"}, {"gamma", "2"}}); }

// Processed next-token distribution after `seq` with a fresh cache. returns [V]
at::Tensor next_probs(model::CausalLM& m, const Tokens& seq) {
  model::KVCache cache = m.make_cache(1, 16);
  at::Tensor logits = forward_tokens(m, cache, seq.data(), static_cast<int64_t>(seq.size()), 0);  // [T, V]
  return sampling::probabilities(logits.narrow(0, logits.size(0) - 1, 1), proc(), seq).squeeze(0);
}

Dist exact_joint(model::CausalLM& m) {
  Dist d;
  const at::Tensor p1 = next_probs(m, kPrompt);
  for (TokenId a = 0; a < p1.size(0); ++a) {
    const double pa = p1[a].item<double>();
    if (pa <= 0) continue;
    Tokens s1 = kPrompt;
    s1.push_back(a);
    const at::Tensor p2 = next_probs(m, s1);
    for (TokenId b = 0; b < p2.size(0); ++b) {
      const double pb = p2[b].item<double>();
      if (pb <= 0) continue;
      Tokens s2 = s1;
      s2.push_back(b);
      const at::Tensor p3 = next_probs(m, s2);
      for (TokenId c = 0; c < p3.size(0); ++c)
        if (p3[c].item<double>() > 0) d[{a, b, c}] = pa * pb * p3[c].item<double>();
    }
  }
  return d;
}

// Chi-square goodness of fit; outcomes expected < 5 times are pooled into one cell, samples
// outside the support go to that cell too. p-value from the Wilson-Hilferty approximation.
double chi_square_p(const Dist& exact, const std::map<Triple, int64_t>& counts, int64_t n) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int64_t n_cells = 0, n_seen = 0;
  for (const auto& [t, p] : exact) {
    const double e = p * double(n);
    auto it = counts.find(t);
    const double o = it == counts.end() ? 0.0 : double(it->second);
    n_seen += int64_t(o);
    if (e < 5) { pooled_e += e; pooled_o += o; continue; }
    stat += (o - e) * (o - e) / e;
    ++n_cells;
  }
  pooled_o += double(n - n_seen);  // impossible outcomes
  if (pooled_e > 0) { stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e; ++n_cells; }
  else if (pooled_o > 0) return 0.0;
  const double k = double(n_cells - 1);
  const double z = (std::cbrt(stat / k) - (1 - 2 / (9 * k))) / std::sqrt(2 / (9 * k));
  const double p = 0.5 * std::erfc(z / std::sqrt(2.0));
  std::printf("  chi2 = %.1f, df = %.0f, p = %.3g\n", stat, k, p);
  return p;
}

struct Models {
  std::shared_ptr<model::CausalLM> tgt = model::make_tiny_llama(model::tiny_llama_config(), 21);
  // The draft shares the target's weights but a softer output head (max prob ~0.25 vs 0.4):
  // related but different, so both acceptance and the residual path are exercised.
  std::shared_ptr<model::CausalLM> dft = model::make_tiny_llama(model::tiny_llama_config(), 21, 0.25);
};
Models& models() {
  static Models m;
  return m;
}

TEST(Distribution, SpeculativeSamplingMatchesTheProcessedTarget) {
  const Dist exact = exact_joint(*models().tgt);
  auto strategy = create("speculative", proc_params());
  Request req;
  req.prompt = kPrompt;
  req.target = models().tgt;
  req.draft = models().dft;
  req.stop.max_new_tokens = 3;
  std::map<Triple, int64_t> counts;
  int64_t n_drafted = 0, n_accepted = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    req.seed = 1000 + uint64_t(i);
    const Result r = strategy->generate(req, {});
    ASSERT_EQ(r.tokens.size(), 3u);
    ++counts[{r.tokens[0], r.tokens[1], r.tokens[2]}];
    n_drafted += r.stats.n_drafted;
    n_accepted += r.stats.n_accepted;
  }
  const double alpha = double(n_accepted) / double(n_drafted);
  std::printf("  alpha = %.3f over %lld drafted\n", alpha, (long long)n_drafted);
  EXPECT_GT(alpha, 0.2);  // both accept and reject paths are exercised
  EXPECT_LT(alpha, 0.95);
  EXPECT_GT(chi_square_p(exact, counts, kSamples), kPValue);
}

// The test has power: 2% total-variation shifts of the exact distribution are rejected.
TEST(Distribution, ChiSquareDetectsTwoPercentTotalVariation) {
  const Dist exact = exact_joint(*models().tgt);
  std::vector<std::pair<Triple, double>> sorted(exact.begin(), exact.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second > b.second; });
  const double tv = 0.02;
  // (a) from the most likely outcome to the second; (b) from the most likely to all, evenly;
  // (c) from the 10 most likely to the rest, proportionally.
  std::vector<Dist> shifted(3, exact);
  shifted[0][sorted[0].first] -= tv;
  shifted[0][sorted[1].first] += tv;
  shifted[1][sorted[0].first] -= tv;
  for (auto& [t, p] : shifted[1]) p += tv / double(exact.size());
  double top10 = 0, rest = 0;
  for (size_t i = 0; i < sorted.size(); ++i) (i < 10 ? top10 : rest) += sorted[i].second;
  for (size_t i = 0; i < sorted.size(); ++i)
    shifted[2][sorted[i].first] += i < 10 ? -tv * sorted[i].second / top10 : tv * sorted[i].second / rest;
  for (size_t s = 0; s < shifted.size(); ++s) {
    Rng rng(7 + s);
    std::vector<std::pair<Triple, double>> cells(shifted[s].begin(), shifted[s].end());
    std::map<Triple, int64_t> counts;
    for (int64_t i = 0; i < kSamples; ++i) {
      double u = rng.uniform(), cum = 0;
      size_t j = 0;
      while (j + 1 < cells.size() && (cum += cells[j].second) <= u) ++j;
      ++counts[cells[j].first];
    }
    EXPECT_LT(chi_square_p(exact, counts, kSamples), kPValue) << "perturbation " << s;
  }
}

// A speculative sampler whose rejection step resamples from p instead of norm(max(0, p - q))
// (a classic bug): the same test must reject it.
TEST(Distribution, BrokenResidualIsDetected) {
  const Dist exact = exact_joint(*models().tgt);
  model::CausalLM& tgt = *models().tgt;
  model::CausalLM& dft = *models().dft;
  std::map<Triple, int64_t> counts;
  Rng rng(99);
  for (int64_t i = 0; i < kSamples / 4; ++i) {
    Tokens seq = kPrompt;
    while (seq.size() < kPrompt.size() + 3) {
      // draft 2 tokens
      Tokens draft_seq = seq, x;
      std::vector<at::Tensor> q;
      for (int j = 0; j < 2; ++j) {
        q.push_back(next_probs(dft, draft_seq));
        x.push_back(sampling::sample_from(q.back().data_ptr<float>(), 32, rng.uniform()));
        draft_seq.push_back(x.back());
      }
      bool rejected = false;
      for (int j = 0; j < 2 && !rejected; ++j) {
        Tokens ctx(seq);
        const at::Tensor p = next_probs(tgt, ctx);
        const double px = p[x[j]].item<double>(), qx = q[j][x[j]].item<double>();
        if (rng.uniform() < std::min(1.0, px / qx)) {
          seq.push_back(x[j]);
        } else {
          seq.push_back(sampling::sample_from(p.data_ptr<float>(), 32, rng.uniform()));  // BUG: p, not residual
          rejected = true;
        }
      }
      if (!rejected) {
        const at::Tensor p = next_probs(tgt, seq);
        seq.push_back(sampling::sample_from(p.data_ptr<float>(), 32, rng.uniform()));
      }
    }
    ++counts[{seq[3], seq[4], seq[5]}];
  }
  EXPECT_LT(chi_square_p(exact, counts, kSamples / 4), kPValue);
}

}  // namespace
