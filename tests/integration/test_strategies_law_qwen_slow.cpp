// The law of the first 3 tokens under speculative sampling with the real Qwen pair
// (Qwen2.5-Coder-0.5B drafting for the 1.5B; label slow): at T = 0.7, top-p 0.8 and
// repetition penalty 1.3, chain (tokenwise), block and static-tree (multi-draft) verification
// give the exact law of the processed 1.5B (test_strategies_law_smollm2.cpp does the same on
// SmolLM2 in CI, at a CI-sized N). Chi-square goodness of fit at level 0.01 per test.
//
// Power: N is computed from the exact law before sampling (samples_for_power): the smallest N
// at which EVERY law at total variation 0.05 from the exact one (on the chi-square's cells)
// is rejected with probability >= 0.8 (noncentral chi-square, noncentrality >= N (2 TV)^2).
// For 5 cells (this prompt) that is N = 1700, for 10 cells 2150, for 20 cells 2800. The test prints N, the cells, that
// power and the one for the worst case of the family "0.05 moved from one outcome to
// another, or spread over the rest". The planted bug (ts::ResidualAsPBackend: the correction token after a
// rejection sampled from p, not the residual) must fail at N / 2 samples: it moves the first
// token's law alone by TV 0.25 here (noncentrality ~N/2 (2 TV)^2 ~ 210, power ~1).
//
// Needs models/qwen2.5-coder-{0.5b,1.5b}-instruct.gguf (~2 GB; scripts/fetch_models.sh);
// skips with a message when they are missing.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/device.h"
#include "model/prefix_reuse.h"
#include "strategies/registry.h"
#include "speculative/proposer.h"
#include "tests/support/spec_distribution.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::strategies;
namespace ts = specdec::test_support;

namespace {

constexpr int64_t kMaxSamples = 20000;  // a law too spread to test in hours fails instead
constexpr int64_t kBatch = 16;
constexpr double kLevel = 0.01;
constexpr double kTv = 0.05;
// A continuation with a few likely outcomes, where the two models disagree: 5 outcomes under
// these processors (N = 1700), and the 0.5B's first draft token is rejected with probability
// 0.48, where the planted bug moves the first token's law alone by TV 0.25 (both computed from
// the two models' first rows). SmolLM2's prompt, "The Eiffel Tower is located in", has ONE
// outcome under the 1.5B (no law to test); "Here is a list of fruits:" has 4, but the planted
// bug moved them by TV 0.006 (the draft's rejected mass lies outside the target's top-p set,
// where the residual is p itself).
const char* const kPrompt = "Python is a";
const char* const kTargetFile = "qwen2.5-coder-1.5b-instruct.gguf";
const char* const kDraftFile = "qwen2.5-coder-0.5b-instruct.gguf";

const std::map<std::string, std::string> kProcessors = {
    {"temperature", "0.7"}, {"top_p", "0.8"}, {"repetition_penalty", "1.3"}};
sampling::ProcessorConfig proc() { return processor_config(resolve("sampling", Params(kProcessors))); }

std::string model_path(const char* file) { return source_dir() + "/models/" + file; }
bool models_present() {
  return std::filesystem::exists(model_path(kTargetFile)) && std::filesystem::exists(model_path(kDraftFile));
}

model::LoadedModel load(const char* file, const std::string& name) {
  model::ModelSpec spec;
  spec.name = name;
  spec.path = model_path(file);
  spec.threads = 0;
  return model::load(spec);  // all cores, packed CPU engine (ragged batches)
}

struct Rig {
  Tokens prompt;
  model::LoadedModel target, draft;
  std::shared_ptr<model::CausalLM> target_reuse, draft_reuse;  // kPrompt's prefill served from a copy
  ts::Dist exact;
  int64_t n = 0;  // samples per path, for >= 80% power at TV 0.05
};

const Rig& rig() {
  static const Rig r = [] {
    Rig rig;
    rig.target = load(kTargetFile, "qwen2.5-coder-1.5b");
    rig.draft = load(kDraftFile, "qwen2.5-coder-0.5b");
    check_tokenizers_compatible(*rig.target.tokenizer, *rig.draft.tokenizer);
    rig.prompt = rig.target.tokenizer->encode(kPrompt, true);
    const std::vector<int64_t> prefix(rig.prompt.begin(), rig.prompt.end());
    rig.target_reuse = std::make_shared<model::PrefixReuse>(rig.target.model, prefix);
    rig.draft_reuse = std::make_shared<model::PrefixReuse>(rig.draft.model, prefix);
    rig.exact = ts::exact_joint_shared(*rig.target.model, rig.prompt, proc());
    // A law with one outcome leaves the chi-square no degree of freedom (and no way to fail).
    if (rig.exact.size() >= 2) rig.n = ts::samples_for_power(rig.exact, kTv, kLevel, 0.8);
    return rig;
  }();
  return r;
}

class QwenLaw : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!models_present())
      GTEST_SKIP() << model_path(kTargetFile) << " or " << model_path(kDraftFile)
                   << " is missing: run `scripts/fetch_models.sh qwen2.5-coder-1.5b qwen2.5-coder-0.5b` (~2 GB)";
  }
  // n samples through verification path `name`; backend null: the target device's own.
  static ts::Samples draw(const std::string& name, int64_t n, std::shared_ptr<kernels::Backend> backend = nullptr) {
    Request req;
    req.prompt = rig().prompt;
    req.target = rig().target_reuse;
    req.draft = rig().draft_reuse;
    req.tokenizer = rig().target.tokenizer;
    req.draft_tokenizer = rig().draft.tokenizer;
    req.backend = std::move(backend);
    return ts::sample_triples(*create("speculative", ts::speculative_path_params(name, kProcessors)), req, n, kBatch);
  }
  // Every verification ran the path's kernel mode, and only the tree path verified trees.
  static void expect_path(const std::string& name, const ts::Samples& s) {
    ASSERT_EQ(s.verify_mode_rounds.size(), 1u) << name;
    EXPECT_EQ(s.verify_mode_rounds.begin()->first, name == "block" ? "block" : "sampling") << name;
    EXPECT_GT(s.verify_mode_rounds.begin()->second, s.n / 2) << name;
    if (name == "tree") EXPECT_GT(s.n_tree_rounds, s.n / 2);
    else EXPECT_EQ(s.n_tree_rounds, 0) << name;
  }
};

TEST_P(QwenLaw, FollowsTheExactProcessedLaw) {
  const Rig& r = rig();
  ASSERT_GE(r.exact.size(), 2u) << "the law of \"" << kPrompt << "\" has one outcome: choose a prompt whose "
                                << "continuation the 1.5B is less sure of";
  ASSERT_LE(r.n, kMaxSamples) << "the law of " << kPrompt << " has " << r.exact.size()
                              << " outcomes: too many for 80% power in reasonable time";
  std::printf("support %zu outcomes, %lld cells at N = %lld; power at TV %.2f: >= %.3f over all laws, %.3f for "
              "the family's worst\n",
              r.exact.size(), static_cast<long long>(ts::chi_square_cells(r.exact, r.n).second),
              static_cast<long long>(r.n), kTv, ts::chi_square_min_power(r.exact, r.n, kTv, kLevel),
              ts::chi_square_family_min_power(r.exact, r.n, kTv, kLevel));
  const ts::Samples s = draw(GetParam(), r.n);
  expect_path(GetParam(), s);
  EXPECT_LT(s.n_accepted, s.n_drafted) << "no rejection: the residual went untested";
  EXPECT_GT(s.n_accepted, 0);
  EXPECT_GT(ts::report_law(GetParam(), r.exact, s), kLevel);
}

TEST_P(QwenLaw, APlantedResidualBugFails) {
  ASSERT_GE(rig().exact.size(), 2u) << "see FollowsTheExactProcessedLaw";
  ASSERT_LE(rig().n, kMaxSamples) << "see FollowsTheExactProcessedLaw";
  auto bug = std::make_shared<ts::ResidualAsPBackend>(model::backend_of(rig().target.model->device()));
  const ts::Samples s = draw(GetParam(), rig().n / 2, bug);
  expect_path(GetParam(), s);
  EXPECT_LT(ts::report_law(GetParam() + " with the planted bug", rig().exact, s), kLevel);
}

INSTANTIATE_TEST_SUITE_P(Verify, QwenLaw, ::testing::Values("chain", "block", "tree"),
                         [](const auto& info) { return info.param; });

}  // namespace


