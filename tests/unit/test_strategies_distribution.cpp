// Speculative sampling preserves the processed target distribution (Leviathan et al. 2023,
// Chen et al. 2023), checked by Monte Carlo on tiny random models (vocab 32) with a real
// draft model: the empirical joint distribution of the first 3 generated tokens is compared
// with the target's exact processed distribution by a chi-square test at p = 0.001 (Boost.Math,
// tests/support/spec_distribution.h).
// Power: N = 20000 samples; the same test must reject (a) 2%-total-variation perturbations of
// the exact distribution and (b) speculative sampling with a broken residual. Under the
// sanitizers the law check itself draws a fifth of N (tests/support/sanitizer.h); (a) and (b)
// keep their counts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

#include "core/rng.h"
#include "model/tiny.h"
#include "strategies/common.h"
#include "strategies/registry.h"
#include "tests/support/sanitizer.h"
#include "tests/support/spec_distribution.h"

using namespace specdec;
using namespace specdec::strategies;

namespace {

using test_support::Dist;
using test_support::Triple;

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

// Processed next-token distribution after `seq` (tests/support/spec_distribution.h). returns [V]
at::Tensor next_probs(model::CausalLM& m, const Tokens& seq) { return test_support::next_probs(m, seq, proc()); }
Dist exact_joint(model::CausalLM& m) { return test_support::exact_joint(m, kPrompt, proc()); }
using test_support::chi_square_p;

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
  const int64_t n = test_support::sanitizer_scaled(kSamples, 5);
  for (int64_t i = 0; i < n; ++i) {
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
  EXPECT_GT(chi_square_p(exact, counts, n), kPValue);
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
