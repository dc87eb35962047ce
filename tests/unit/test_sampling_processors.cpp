// Logits processors against Hugging Face (fixture from scripts/reference/make_beam_fixtures.py)
// and against hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/processors.h"

using specdec::Tokens;
using namespace specdec::sampling;

namespace {

at::Tensor row(const std::vector<float>& v) {  // -> [1, V]
  return at::tensor(at::ArrayRef<float>(v), at::kFloat).unsqueeze(0).clone();
}

TEST(Processors, MatchHuggingFaceFixture) {
  std::ifstream in(SPECDEC_SOURCE_DIR "/tests/fixtures/strategies/processors.json");
  ASSERT_TRUE(in) << "missing fixture; run scripts/reference/make_beam_fixtures.py";
  const auto fx = nlohmann::json::parse(in);
  ASSERT_GE(fx["cases"].size(), 6u);
  for (const auto& c : fx["cases"]) {
    ProcessorConfig cfg;
    cfg.temperature = c["config"]["temperature"];
    cfg.top_k = c["config"]["top_k"];
    cfg.top_p = c["config"]["top_p"];
    cfg.min_p = c["config"]["min_p"];
    cfg.repetition_penalty = c["config"]["repetition_penalty"];
    const Tokens context = c["context"].get<Tokens>();
    const at::Tensor probs = probabilities(row(c["logits"].get<std::vector<float>>()), cfg, context);  // [1, V]
    const auto expected = c["probs"].get<std::vector<float>>();
    ASSERT_EQ(probs.size(1), static_cast<int64_t>(expected.size()));
    for (size_t v = 0; v < expected.size(); ++v) {
      // Filtering decisions must agree exactly; surviving probabilities to float rounding.
      EXPECT_EQ(expected[v] == 0.0f, probs[0][v].item<float>() == 0.0f) << c["config"].dump() << " token " << v;
      EXPECT_NEAR(probs[0][v].item<float>(), expected[v], 1e-6) << c["config"].dump() << " token " << v;
    }
  }
}

TEST(Processors, TopKKeepsTiesAndTopPKeepsArgmax) {
  ProcessorConfig cfg;
  cfg.top_k = 2;
  at::Tensor p = probabilities(row({1.0f, 3.0f, 3.0f, 3.0f, 0.0f}), cfg, {});
  EXPECT_FLOAT_EQ(p[0][0].item<float>(), 0.0f);
  EXPECT_NEAR(p[0][1].item<float>(), 1.0 / 3.0, 1e-6);  // HF keeps every score >= k-th largest
  EXPECT_NEAR(p[0][3].item<float>(), 1.0 / 3.0, 1e-6);
  cfg = {};
  cfg.top_p = 0.01;
  p = probabilities(row({0.0f, 5.0f, 1.0f}), cfg, {});
  EXPECT_FLOAT_EQ(p[0][1].item<float>(), 1.0f);
}

TEST(Processors, RepetitionPenaltyPerRowSeesPreviousDraftTokens) {
  ProcessorConfig cfg;
  cfg.temperature = 0;  // greedy: penalty only
  cfg.repetition_penalty = 4.0;
  // Row 0 sees context {}, row 1 also sees extra[0] = 0, whose logit 2 -> 0.5 < 1.
  at::Tensor logits = at::cat({row({2.0f, 1.0f, -3.0f}), row({2.0f, 1.0f, -3.0f})}, 0);  // [2, 3]
  at::Tensor p = probabilities(logits, cfg, {}, {0});
  EXPECT_EQ(p[0].argmax().item<int64_t>(), 0);
  EXPECT_EQ(p[1].argmax().item<int64_t>(), 1);
  at::Tensor s = process_logits(logits, cfg, {2}, {0});
  EXPECT_FLOAT_EQ(s[0][2].item<float>(), -12.0f);  // negative logits are multiplied
  EXPECT_FLOAT_EQ(s[1][0].item<float>(), 0.5f);    // positive logits are divided
  EXPECT_EQ(greedy_token(logits[1].contiguous(), cfg, {0}), 1);
  EXPECT_EQ(greedy_token(logits[1].contiguous(), cfg, {}), 0);
}

TEST(Processors, GreedyIsOneHotAndTemperatureSharpens) {
  ProcessorConfig cfg;
  cfg.temperature = 0;
  at::Tensor p = probabilities(row({0.1f, 0.3f, 0.2f}), cfg, {});
  EXPECT_FLOAT_EQ(p[0][1].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(p.sum().item<float>(), 1.0f);
  cfg.temperature = 0.5;
  p = probabilities(row({0.0f, std::log(2.0f)}), cfg, {});
  EXPECT_NEAR(p[0][1].item<float>(), 0.8, 1e-6);  // 4 : 1 at T = 0.5
}

TEST(Processors, SampleFromFollowsCdf) {
  const std::vector<float> probs = {0.0f, 0.25f, 0.0f, 0.75f};
  EXPECT_EQ(sample_from(probs.data(), 4, 0.0), 1);
  EXPECT_EQ(sample_from(probs.data(), 4, 0.2499), 1);
  EXPECT_EQ(sample_from(probs.data(), 4, 0.25), 3);
  EXPECT_EQ(sample_from(probs.data(), 4, 0.9999999), 3);
  const std::vector<float> zeros = {0.0f, 0.0f};
  EXPECT_THROW(sample_from(zeros.data(), 2, 0.5), specdec::Error);
}

TEST(Processors, BadConfigIsAnError) {
  ProcessorConfig cfg;
  cfg.top_p = 0;
  EXPECT_THROW(probabilities(row({1.0f}), cfg, {}), specdec::Error);
  cfg = {};
  cfg.repetition_penalty = 1.5;
  EXPECT_THROW(probabilities(row({1.0f, 2.0f}), cfg, {7}), specdec::Error);  // id outside vocab
}

}  // namespace
