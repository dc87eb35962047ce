// Speculative sampling keeps the processed target's law on a real model: the first 3 tokens
// that SmolLM2-135M generates after kPrompt at T = 0.7, top-p 0.8 and repetition penalty 1.3,
// drawn through chain (tokenwise), block and static-tree (multi-draft) verification with a
// draft that disagrees (SmolLM2 without layers 20 and 25: alpha ~0.6, so rejections and
// residual samples are frequent), follow the exact law of the processed target (enumerated by
// tests/support/spec_distribution.h: exact_joint_shared). One chi-square goodness of fit per
// path at level 0.01 (a single test over all cells, so no Bonferroni; the seeds are fixed, so
// a build passes or fails deterministically); the total variation (TV) between the empirical
// and exact law is printed. A planted bug (the correction token after a rejection sampled
// from p instead of the residual: ts::ResidualAsPBackend) must fail the same check.
//
// Power (PowerAtTotalVariation005 computes it): the law has 8 outcomes; at N = kSamples = 600
// they make 7 cells (the rarest pooled), df 6. The least power over EVERY law at TV 0.05 on
// those cells (noncentrality >= N (2 TV)^2, Cauchy-Schwarz) is 0.19; for the worst case of
// the family "0.05 moved from one outcome to another, or from one spread over the rest in
// proportion" (spread from the likeliest) it is 0.21. That is what fits CI's ~3 minutes on 2
// cores (the file takes ~130 s: a sample costs ~40 ms on a chain, ~90 ms on a tree, in the
// forwards and the top-p sort of 49k logits per row). 80% power at TV 0.05 needs N = 2000
// (SPECDEC_LAW_FULL_POWER=1 runs that, ~3x longer); CI's N has 80% power at TV ~0.09.
// The planted bug moves the law by TV ~0.3 (chain, block) and ~0.25 (tree), noncentrality
// ~0.5 N and ~0.3 N: at kBugSamples = 150 it fails with power > 0.999 (p ~1e-8 .. 1e-15).
#include <gtest/gtest.h>

#include <cstdlib>

#include "model/device.h"
#include "model/layer_subset.h"
#include "model/prefix_reuse.h"
#include "strategies/registry.h"
#include "tests/support/smollm2.h"
#include "tests/support/spec_distribution.h"
#include "tokenizer/tokenizer.h"

using namespace specdec;
using namespace specdec::strategies;
namespace ts = specdec::test_support;
using specdec::testing_support::smollm2;

namespace test_strategies_law_smollm2 {  // this file's own names (its tests compile in a batch with others)

constexpr int64_t kSamples = 600;     // per verification path (CI-sized; see the power above)
constexpr int64_t kBugSamples = 150;  // the planted bug's effect is large
constexpr int64_t kBatch = 16;
constexpr double kLevel = 0.01;       // per chi-square test
constexpr double kTv = 0.05;
// A peaked continuation (" Paris, France" / " the Champ de" / ...): 8 outcomes under top-p.
const char* const kPrompt = "The Eiffel Tower is located in";

const std::map<std::string, std::string> kProcessors = {
    {"temperature", "0.7"}, {"top_p", "0.8"}, {"repetition_penalty", "1.3"}};
// The same chain as the strategies build from kProcessors (registry.h: processor_config).
sampling::ProcessorConfig proc() { return processor_config(resolve("sampling", Params(kProcessors))); }

// Every verification ran the path's kernel mode (rounds without a draft have none), and only
// the tree path verified trees.
void expect_path(const std::string& name, const ts::Samples& s) {
  const std::string mode = name == "block" ? "block" : "sampling";
  ASSERT_EQ(s.verify_mode_rounds.size(), 1u) << name;
  EXPECT_EQ(s.verify_mode_rounds.begin()->first, mode) << name;
  EXPECT_GT(s.verify_mode_rounds.begin()->second, s.n / 2) << name;
  if (name == "tree") EXPECT_GT(s.n_tree_rounds, s.n / 2);
  else EXPECT_EQ(s.n_tree_rounds, 0) << name;
}

struct Rig {
  Tokens prompt;
  std::shared_ptr<model::CausalLM> target, draft;
  ts::Dist exact;
};

// Built once: every sample starts from kPrompt, so both models serve its prefill from a copy
// (model/prefix_reuse.h: bit for bit the same rows, without ~95% of the cost).
const Rig& rig() {
  static const Rig r = [] {
    const model::LoadedModel& m = smollm2();
    Rig rig;
    rig.prompt = m.tokenizer->encode(kPrompt, true);
    const std::vector<int64_t> prefix(rig.prompt.begin(), rig.prompt.end());
    std::vector<int64_t> keep;
    for (int64_t l = 0; l < m.model->config().n_layers; ++l)
      if (l != 20 && l != 25) keep.push_back(l);
    rig.target = std::make_shared<model::PrefixReuse>(m.model, prefix);
    rig.draft = std::make_shared<model::PrefixReuse>(model::make_layer_subset(m.model, keep), prefix);
    rig.exact = ts::exact_joint_shared(*m.model, rig.prompt, proc());
    return rig;
  }();
  return r;
}

int64_t samples() {
  return std::getenv("SPECDEC_LAW_FULL_POWER") ? ts::samples_for_power(rig().exact, kTv, kLevel, 0.8) : kSamples;
}

// n samples through verification path `name`; backend null: the target device's own.
ts::Samples draw(const std::string& name, int64_t n, std::shared_ptr<kernels::Backend> backend = nullptr) {
  Request req;
  req.prompt = rig().prompt;
  req.target = rig().target;
  req.draft = rig().draft;
  req.tokenizer = smollm2().tokenizer;
  req.backend = std::move(backend);
  return ts::sample_triples(*create("speculative", ts::speculative_path_params(name, kProcessors)), req, n, kBatch);
}

// The fast enumeration (one cache, siblings in one forward) equals the slow reference (a
// fresh forward per prefix), and the law sums to 1.
TEST(SmolLM2Law, SharedPrefixEnumerationEqualsFreshForwards) {
  const ts::Dist slow = ts::exact_joint(*smollm2().model, rig().prompt, proc());
  ASSERT_EQ(slow.size(), rig().exact.size());
  double total = 0;
  for (const auto& [t, p] : slow) {
    ASSERT_TRUE(rig().exact.count(t));
    EXPECT_NEAR(rig().exact.at(t), p, 1e-5);
    total += rig().exact.at(t);
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  std::printf("support: %zu outcomes\n", rig().exact.size());
  for (const auto& [t, p] : rig().exact)
    std::printf("  %.4f [%s]\n", p, smollm2().tokenizer->decode(Tokens(t.begin(), t.end())).c_str());
}

// The stated power at kSamples (header comment), and the N for 80% power.
TEST(SmolLM2Law, PowerAtTotalVariation005) {
  const ts::Dist& exact = rig().exact;
  const double family_min = ts::chi_square_family_min_power(exact, kSamples, kTv, kLevel);
  const double bound = ts::chi_square_min_power(exact, kSamples, kTv, kLevel);
  const int64_t n80 = ts::samples_for_power(exact, kTv, kLevel, 0.8);
  std::printf("cells at N = %lld: %lld; power at TV %.2f: >= %.3f over all laws, %.3f for the family's worst; "
              "80%% power needs N = %lld\n",
              static_cast<long long>(kSamples), static_cast<long long>(ts::chi_square_cells(exact, kSamples).second),
              kTv, bound, family_min, static_cast<long long>(n80));
  EXPECT_GE(bound, 0.19);  // as stated in the header comment
  EXPECT_GE(family_min, bound - 1e-9);
}

class SmolLM2LawPath : public ::testing::TestWithParam<std::string> {};

TEST_P(SmolLM2LawPath, FollowsTheExactProcessedLaw) {
  const ts::Samples s = draw(GetParam(), samples());
  expect_path(GetParam(), s);
  EXPECT_LT(s.n_accepted, s.n_drafted * 9 / 10) << "too few rejections to exercise the residual";
  EXPECT_GT(s.n_accepted, 0);
  EXPECT_GT(ts::report_law(GetParam(), rig().exact, s), kLevel);
}

TEST_P(SmolLM2LawPath, APlantedResidualBugFails) {
  auto bug = std::make_shared<ts::ResidualAsPBackend>(model::backend_of(rig().target->device()));
  const ts::Samples s = draw(GetParam(), kBugSamples, bug);
  expect_path(GetParam(), s);
  EXPECT_LT(ts::report_law(GetParam() + " with the planted bug", rig().exact, s), kLevel);
}

// The fast tier checks the chain (the law area's real-model test); block and tree verification
// run in the heavy tier (their tiny-model twins: DrafterDistribution.* in
// test_strategies_drafters_distribution, and the trained heads' law in test_train_heads_tiny).
// ctest-heavy: Verify/SmolLM2LawPath.*/block:Verify/SmolLM2LawPath.*/tree
INSTANTIATE_TEST_SUITE_P(Verify, SmolLM2LawPath, ::testing::Values("chain", "block", "tree"),
                         [](const auto& info) { return info.param; });

}  // namespace test_strategies_law_smollm2
