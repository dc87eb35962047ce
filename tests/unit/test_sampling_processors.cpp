// Logits processors against Hugging Face (fixture from scripts/reference/make_beam_fixtures.py)
// and against hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/processors.h"
#include "tests/reference/reference_processors.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using specdec::Tokens;
using namespace specdec::sampling;

namespace {

at::Tensor row(const std::vector<float>& v) {  // -> [1, V]
  return at::tensor(at::ArrayRef<float>(v), at::kFloat).unsqueeze(0).clone();
}

TEST(Processors, MatchHuggingFaceFixture) {
  std::ifstream in(source_dir() + "/tests/fixtures/strategies/processors.json");
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

// Top-p at a boundary that float arithmetic hits exactly: four equal scores are 0.25 each, and
// at top_p 0.75 the mass at and below the fourth is 0.25 = 1 - top_p, which HF drops (<=); of
// equal scores the higher id goes first (the exact-law reference's order), -0 equal to +0.
TEST(Processors, TopPAtAnExactBoundaryDropsTheHigherIdsOfATie) {
  for (const std::vector<float>& scores : {std::vector<float>{1, 1, 1, 1}, std::vector<float>{-0.0f, 0, 0, 0}})
    for (const auto& [top_p, kept] : std::vector<std::pair<double, int>>{{0.75, 3}, {0.5, 2}, {0.25, 1}, {0.8, 4}}) {
      ProcessorConfig cfg;
      cfg.top_p = top_p;
      const at::Tensor p = probabilities(row(scores), cfg, {});
      for (int v = 0; v < 4; ++v)
        EXPECT_FLOAT_EQ(p[0][v].item<float>(), v < kept ? 1.0f / kept : 0.0f)
            << "scores " << scores[0] << " top_p " << top_p << " token " << v;
    }
}

// On the host, top-p ranks the vocabulary only as far as the nucleus reaches (64 tokens, then 4x
// more). SmolLM2's 49152 tokens with scores from peaked to flat, rounded to 1/8 so that many are
// equal (ties across each step's edge), at three top_p: the kept set equals the exact-law
// reference's (which sorts everything, in double), and nuclei of every size occur.
TEST(Processors, TopPOnALargeVocabularyKeepsTheReferencesNucleus) {
  namespace ref = specdec::reference;
  const int64_t V = 49152;
  std::mt19937 gen(11);
  int small = 0, medium = 0, large = 0;
  for (const double spread : {6.0, 2.0, 0.5})
    for (const double top_p : {0.5, 0.9, 0.99}) {
      std::normal_distribution<float> normal(0.0f, static_cast<float>(spread));
      std::vector<float> scores(V);
      for (float& x : scores) x = std::round(normal(gen) * 8.0f) / 8.0f;
      ProcessorConfig cfg;
      cfg.top_p = top_p;
      const at::Tensor got = process_logits(row(scores), cfg, {});
      ref::Row want(scores.begin(), scores.end());
      ref::apply_top_p(want, top_p);
      int64_t kept = 0;
      for (int64_t v = 0; v < V; ++v) {
        const bool survives = std::isfinite(got[0][v].item<float>());
        ASSERT_EQ(survives, std::isfinite(want[v])) << "spread " << spread << " top_p " << top_p << " token " << v;
        kept += survives;
      }
      (kept <= 64 ? small : kept <= 256 ? medium : large) += 1;
    }
  EXPECT_GT(small, 0);
  EXPECT_GT(medium + large, 0);
  EXPECT_GT(large, 2);
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

// A draft held where the logits are (DeviceDraft: a drafter's unread picks) is penalised as a
// mask (penalise_on_device); the host's draft by the id lists (penalise). The two give the same
// scores bit for bit: chains and random trees, with repeated ids in the draft and in the
// context, positive and negative logits, before and after the warpers; and with explicit row
// nodes (a draft loop's or a tree level's rows), against the host run on context + each row's
// own path. On a GPU the same mask path runs there (scripts/gpu_check.sh runs this test on CPU
// tensors only; the device tests compare tokens).
TEST(Processors, DeviceDraftPenaltyEqualsTheHostsBitForBit) {
  at::manual_seed(5);
  std::mt19937 gen(5);
  const int64_t V = 97;
  for (int trial = 0; trial < 60; ++trial) {
    ProcessorConfig cfg;
    cfg.repetition_penalty = trial % 2 ? 1.7 : 0.6;  // < 1 too: seen tokens rise
    cfg.temperature = trial % 3 == 0 ? 0.0 : 0.8;
    cfg.top_p = trial % 4 == 1 ? 0.9 : 1.0;
    const int64_t D = 1 + trial % 9;
    Tokens ctx, draft;
    for (int j = 0; j < 12; ++j) ctx.push_back(static_cast<specdec::TokenId>(gen() % 30));  // repeats
    std::vector<int32_t> parents;
    for (int64_t j = 0; j < D; ++j) {
      draft.push_back(static_cast<specdec::TokenId>(gen() % 40));
      parents.push_back(static_cast<int32_t>(static_cast<int64_t>(gen() % (j + 1)) - 1));  // in [-1, j)
    }
    const bool chain = trial % 5 == 0;
    if (chain) parents.clear();
    const at::Tensor logits = at::randn({D + 1, V}) * 3;
    DeviceDraft dev;
    dev.tokens = at::tensor(std::vector<int64_t>(draft.begin(), draft.end()));
    if (!chain) dev.parents = at::tensor(std::vector<int64_t>(parents.begin(), parents.end()));
    const std::string what = "trial " + std::to_string(trial);
    EXPECT_TRUE(process_logits(logits, cfg, ctx, dev).equal(process_logits(logits, cfg, ctx, draft, parents))) << what;
    EXPECT_TRUE(probabilities(logits, cfg, ctx, dev).equal(probabilities(logits, cfg, ctx, draft, parents))) << what;
    // Explicit row nodes, some rows after the context alone (-1).
    std::vector<int64_t> nodes;
    for (int64_t r = 0; r < 4; ++r) nodes.push_back(static_cast<int64_t>(gen() % (D + 1)) - 1);
    dev.rows = at::tensor(nodes);
    const at::Tensor rows = at::randn({4, V}) * 3;
    const at::Tensor got = process_logits(rows, cfg, ctx, dev);
    for (int64_t r = 0; r < 4; ++r) {
      Tokens path;  // leaf first
      for (int64_t a = nodes[r]; a >= 0; a = chain ? a - 1 : parents[a]) path.push_back(draft[a]);
      Tokens text = ctx;
      text.insert(text.end(), path.rbegin(), path.rend());
      EXPECT_TRUE(got[r].equal(process_logits(rows[r].unsqueeze(0), cfg, text)[0])) << what << ", row " << r;
    }
  }
  // The hand case above, as a device draft: row 1 follows draft node 0 (id 0: 2 -> 0.5).
  ProcessorConfig cfg;
  cfg.temperature = 0;
  cfg.repetition_penalty = 4.0;
  DeviceDraft dev;
  dev.tokens = at::tensor(std::vector<int64_t>{0});
  const at::Tensor s = process_logits(at::cat({row({2.0f, 1.0f, -3.0f}), row({2.0f, 1.0f, -3.0f})}), cfg, {2}, dev);
  EXPECT_FLOAT_EQ(s[0][0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(s[0][2].item<float>(), -12.0f);
  EXPECT_FLOAT_EQ(s[1][0].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(s[1][1].item<float>(), 1.0f);
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

// The single argmax (kernels::math::argmax_row, via argmax_rows and greedy_token) is the same
// function as at::argmax wherever at::argmax is defined by the docs (no NaN): on random rows
// wide enough to cross argmax_row's 2048-wide blocks, and on rows built from few distinct
// values so that ties are everywhere (both take the lowest id).
TEST(Processors, ArgmaxRowsIsAtArgmaxWithLowestIdTies) {
  at::manual_seed(7);
  const at::Tensor wide = at::randn({16, 5000});
  EXPECT_TRUE(argmax_rows(wide).equal(wide.argmax(1)));
  const at::Tensor tied = at::randint(0, 3, {64, 4100}).to(at::kFloat);  // every row ties
  EXPECT_TRUE(argmax_rows(tied).equal(tied.argmax(1)));
  at::Tensor late = at::zeros({2, 6000});
  late[0][4097] = 1, late[0][5999] = 1;  // the max first appears in the third block
  late[1].fill_(-INFINITY);              // all -inf: id 0
  EXPECT_EQ(argmax_rows(late)[0].item<int64_t>(), 4097);
  EXPECT_EQ(argmax_rows(late)[1].item<int64_t>(), 0);
  // NaN ranks as -inf (at::argmax would return the NaN's index instead).
  EXPECT_EQ(argmax_rows(row({NAN, 1.0f, 3.0f, NAN})).item<int64_t>(), 2);
  // greedy_token is the same argmax, on every row.
  for (int64_t r = 0; r < tied.size(0); ++r)
    EXPECT_EQ(greedy_token(tied[r].contiguous(), ProcessorConfig{0.0}, {}), tied[r].argmax().item<int64_t>());
}

// greedy_token and the processor chain share one penalty: greedy_token equals the argmax of
// process_logits, including the sign rule (divide positive, multiply negative).
TEST(Processors, GreedyTokenUsesTheChainsPenalty) {
  ProcessorConfig cfg;
  cfg.temperature = 0.0;
  cfg.repetition_penalty = 2.0;
  // 3.0 seen -> 1.5 < 2.0: id 1 wins. -1.0 seen -> -2.0 < -1.5: id 2 wins in the negative row.
  EXPECT_EQ(greedy_token(at::tensor({3.0f, 2.0f, 0.0f}), cfg, {0}), 1);
  EXPECT_EQ(greedy_token(at::tensor({-1.0f, -3.0f, -1.5f}), cfg, {0, 0}), 2);
  at::manual_seed(3);
  for (int trial = 0; trial < 50; ++trial) {
    const at::Tensor logits = at::randn({1, 300});
    Tokens ctx;
    for (int j = 0; j < 40; ++j) ctx.push_back(static_cast<specdec::TokenId>((trial * 37 + j * 11) % 300));
    const at::Tensor chain = process_logits(logits, cfg, ctx);
    EXPECT_EQ(greedy_token(logits[0].contiguous(), cfg, ctx), argmax_rows(chain)[0].item<int64_t>());
    // and the one-hot of probabilities() sits on the same id
    EXPECT_EQ(probabilities(logits, cfg, ctx)[0].argmax().item<int64_t>(), greedy_token(logits[0].contiguous(), cfg, ctx));
  }
}

// sample_from is the index-order inverse CDF, checked against a direct cumulative sum.
TEST(Processors, SampleFromIsIndexOrderInverseCdf) {
  at::manual_seed(11);
  const at::Tensor p = at::rand({257}).pow(4);  // uneven masses
  const at::Tensor probs = (p / p.sum()).contiguous();
  const float* d = probs.data_ptr<float>();
  for (int k = 0; k < 2000; ++k) {
    const double u = (k + 0.5) / 2000.0;
    double cum = 0;
    int64_t want = -1;
    for (int64_t v = 0; v < 257 && want < 0; ++v)
      if ((cum += d[v]) > u) want = v;
    if (want < 0) want = 256;  // rounding slack goes to the last positive entry
    EXPECT_EQ(sample_from(d, 257, u), want) << "u " << u;
  }
}

}  // namespace
