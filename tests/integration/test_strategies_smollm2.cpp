// Strategies on SmolLM2-135M-Instruct (real weights):
//  - greedy speculative decoding (n-gram drafter; draft = target) equals greedy, token for token;
//  - beam search equals Hugging Face beam search (fixture from scripts/reference/make_beam_fixtures.py);
//  - stop strings spanning two tokens; seeded sampling is reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/causal_lm.h"
#include "model/layer_subset.h"
#include "strategies/registry.h"
#include "speculative/proposer.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/smollm2.h"
#include "tests/support/smollm2_request.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::strategies;

namespace test_strategies_smollm2 {  // this file's own names (its tests compile in a batch with others)

const std::string& kModel = specdec::testing_support::kSmolLM2;
using specdec::testing_support::smollm2;

class SmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel))
        << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  }
  Request request(const std::string& user_text, int64_t max_new) const {
    return specdec::testing_support::smollm2_chat_request(user_text, max_new);
  }
};

const char* kCopyPrompts[] = {
    "Rename the variable `count` to `total` in this code and return the full code:\n"
    "def add(values):\n    count = 0\n    for v in values:\n        count += v\n    return count\n",
    "Repeat this sentence exactly: \"The quick brown fox jumps over the lazy dog near the river bank.\"",
    "Summarise with a quote: The committee said \"the budget will grow by ten percent next year\" and "
    "added that \"hiring will resume in spring\".",
};

Params greedy(std::map<std::string, std::string> extra = {}) {
  extra["temperature"] = "0";
  return Params(extra);
}

TEST_F(SmolLM2, GreedySpeculativeEqualsGreedyWithNgramDrafter) {
  for (const char* prompt : kCopyPrompts) {
    const Request req = request(prompt, 48);
    const Result base = create("greedy", {})->generate(req, {});
    const Result spec = create("speculative", greedy({{"drafter", "ngram"}}))->generate(req, {});
    EXPECT_EQ(spec.tokens, base.tokens) << prompt << "\n-- greedy: " << base.text << "\n-- spec: " << spec.text;
    EXPECT_EQ(spec.text, base.text);
    EXPECT_EQ(spec.finish, base.finish);
    std::printf("  ngram: alpha %.3f tau %.2f (%lld drafted)\n", spec.stats.alpha(), spec.stats.tau(),
                (long long)spec.stats.n_drafted);
  }
}

TEST_F(SmolLM2, GreedySpeculativeWithDraftEqualToTargetAcceptsEverything) {
  Request req = request(kCopyPrompts[0], 40);
  const Result base = create("greedy", {})->generate(req, {});
  req.draft = req.target;
  req.draft_tokenizer = req.tokenizer;
  const Result spec = create("speculative", greedy({{"gamma", "4"}}))->generate(req, {});
  EXPECT_EQ(spec.tokens, base.tokens) << base.text << "\n-- spec: " << spec.text;
  EXPECT_DOUBLE_EQ(spec.stats.alpha(), 1.0);
  EXPECT_GT(spec.stats.n_drafted, 0);
}

TEST_F(SmolLM2, BeamSearchMatchesHuggingFace) {
  std::ifstream in(source_dir() + "/tests/fixtures/strategies/beam_smollm2.json");
  ASSERT_TRUE(in) << "missing fixture: run scripts/reference/make_beam_fixtures.py";
  const auto fx = nlohmann::json::parse(in);
  int n_checked = 0;
  for (const auto& c : fx["cases"]) {
    Request req;
    req.target = smollm2().model;
    req.tokenizer = smollm2().tokenizer;
    req.prompt = c["prompt_ids"].get<Tokens>();
    req.stop.eos_ids = fx["eos_ids"].get<Tokens>();
    req.stop.max_new_tokens = fx["max_new_tokens"];
    EXPECT_EQ(create("greedy", {})->generate(req, {}).tokens, c["greedy"].get<Tokens>()) << c["prompt"];
    for (const auto& b : c["beams"]) {
      const Params p({{"num_beams", "4"}, {"num_return_sequences", "2"},
                      {"length_penalty", std::to_string(b["length_penalty"].get<double>())},
                      {"early_stopping", b["early_stopping"].get<std::string>()}});
      const Result r = create("beam", p)->generate(req, {});
      ASSERT_EQ(r.sequences.size(), 2u);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(r.sequences[i].tokens, b["sequences"][i].get<Tokens>())
            << c["prompt"] << " lp=" << b["length_penalty"] << " es=" << b["early_stopping"] << " seq " << i;
        // Our logits differ from HF's by ~1e-4 (fp32 summation order); summed over 32 tokens
        // (and multiplied by n for length_penalty -1) scores agree to ~1e-5 relative.
        const double ref = b["scores"][i].get<double>();
        EXPECT_NEAR(r.sequences[i].score, ref, 1e-3 + 2e-5 * std::abs(ref));
      }
      ++n_checked;
    }
  }
  EXPECT_EQ(n_checked, 20);
}

TEST_F(SmolLM2, StopStringSpanningTwoTokensIsCutAndSpeculativeStopsThereToo) {
  Request req = request(kCopyPrompts[1], 40);
  const Result base = create("greedy", {})->generate(req, {});
  const auto& tok = *req.tokenizer;
  // A stop string made of the end of token i and the start of token i+1, new at that point.
  std::string stop, prefix;
  size_t i_end = 0;
  for (size_t i = 2; i + 1 < base.tokens.size() && stop.empty(); ++i) {
    const std::string a = tok.token_bytes(base.tokens[i]), b = tok.token_bytes(base.tokens[i + 1]);
    std::string before;
    for (size_t j = 0; j < i; ++j) before += tok.token_bytes(base.tokens[j]);
    if (a.size() < 2 || b.size() < 2 || tok.is_special(base.tokens[i + 1])) continue;
    const std::string cand = a.substr(a.size() - 2) + b.substr(0, 2);
    if ((before + a + b).find(cand) != before.size() + a.size() - 2) continue;
    stop = cand;
    prefix = before + a.substr(0, a.size() - 2);
    i_end = i + 1;
  }
  ASSERT_FALSE(stop.empty()) << "no suitable token pair in: " << base.text;
  req.stop.stop_strings = {"never appears \x01", stop};
  const Tokens expected(base.tokens.begin(), base.tokens.begin() + i_end + 1);
  for (const char* name : {"greedy", "speculative"}) {
    std::string streamed;
    const Result r = create(name, greedy({}))->generate(req, [&](const Tokens&, const std::string& t) { streamed += t; });
    EXPECT_EQ(r.finish, FinishReason::stop_string) << name;
    EXPECT_EQ(r.text, prefix) << name << " stop='" << stop << "'";
    EXPECT_EQ(streamed, prefix) << name;
    EXPECT_EQ(r.tokens, expected) << name;
  }
}

TEST_F(SmolLM2, SeededSamplingIsReproducible) {
  Request req = request("Write a haiku about the sea.", 24);
  req.seed = 1234;
  const Params p({{"temperature", "0.8"}, {"top_p", "0.9"}});
  const Result a = create("sampling", p)->generate(req, {});
  const Result b = create("sampling", p)->generate(req, {});
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  const Result s1 = create("speculative", Params({{"temperature", "0.8"}, {"drafter", "ngram"}}))->generate(req, {});
  const Result s2 = create("speculative", Params({{"temperature", "0.8"}, {"drafter", "ngram"}}))->generate(req, {});
  EXPECT_EQ(s1.tokens, s2.tokens);
}

TEST_F(SmolLM2, TokenizerCompatibilityCheck) {
  EXPECT_NO_THROW(check_tokenizers_compatible(*smollm2().tokenizer, *smollm2().tokenizer));
}

// Every drafter, reached through the registry, keeps greedy output token-exact, and each run
// both accepts and rejects draft tokens (so the tree compaction and catch-up paths run).
TEST_F(SmolLM2, GreedySpeculativeEqualsGreedyWithEveryDrafter) {
  // The draft for `model` and `tree`: SmolLM2 without 5 of its 30 layers, which disagrees with
  // the target often enough that partial paths, compaction and catch-up all run.
  std::vector<int64_t> keep;
  for (int64_t l = 0; l < 30; ++l)
    if (l < 10 || l > 22 || (l - 10) % 3 != 0) keep.push_back(l);
  const auto draft = model::make_layer_subset(smollm2().model, keep);
  const std::vector<std::pair<std::map<std::string, std::string>, bool>> cases = {
      {{{"drafter", "model"}}, true},
      {{{"drafter", "tree"}, {"tree_branching", "3,2,2,1"}}, true},
      {{{"drafter", "tree"}, {"tree_budget", "12"}, {"tree_topk", "3"}, {"gamma", "6"}}, true},
      {{{"drafter", "layer_skip"}, {"skip_layers", "10,13,16,19,22"}}, false},
      {{{"drafter", "layer_skip"}, {"skip_ratio", "0.15"}, {"skip_search", "4"}}, false},
      {{{"drafter", "suffix"}}, false},
      {{{"drafter", "suffix"}, {"suffix_tree_width", "3"}}, false},
      {{{"drafter", "recycling"}}, false},
      {{{"drafter", "lookahead"}}, false},
  };
  const auto& m = smollm2();
  const std::vector<Tokens> prompts = {
      m.tokenizer->encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", true),
      request(kCopyPrompts[0], 1).prompt,
  };
  int64_t rejected = 0;
  for (const Tokens& prompt : prompts) {
    Request req = request("", 40);
    req.prompt = prompt;
    const Result base = create("greedy", {})->generate(req, {});
    for (const auto& [params, needs_draft] : cases) {
      req.draft = needs_draft ? draft : nullptr;
      const Result spec = create("speculative", greedy(params))->generate(req, {});
      std::string name;
      for (const auto& [k, v] : params) name += k + "=" + v + " ";
      EXPECT_EQ(spec.tokens, base.tokens) << name << "\n-- greedy: " << base.text << "\n-- spec: " << spec.text;
      EXPECT_GT(spec.stats.n_accepted, 0) << name;
      rejected += spec.stats.n_rounds - (spec.stats.n_accepted == spec.stats.n_drafted ? spec.stats.n_rounds : 0);
      std::printf("  %-52s tau %.2f, %lld of %lld draft tokens accepted\n", name.c_str(), spec.stats.tau(),
                  (long long)spec.stats.n_accepted, (long long)spec.stats.n_drafted);
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace test_strategies_smollm2
