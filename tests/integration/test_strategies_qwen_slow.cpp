// Greedy speculative decoding with Qwen2.5-Coder-0.5B drafting for Qwen2.5-Coder-1.5B equals
// greedy decoding of the 1.5B, token for token, with every drafter and with the draft
// requantised to Q4_1 (dtype q4_1; label slow: the Qwen pair).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "model/causal_lm.h"
#include "strategies/registry.h"
#include "speculative/proposer.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::strategies;

namespace {

model::LoadedModel load(const std::string& file, const std::string& name, const std::string& dtype = "auto") {
  const std::string path = source_dir() + "/models/" + file;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run `scripts/fetch_models.sh " << name << "`";
    return {};
  }
  model::ModelSpec spec;
  spec.name = name;
  spec.path = path;
  spec.threads = 2;
  spec.dtype = dtype;
  return model::load(spec);
}

TEST(QwenPair, GreedySpeculativeEqualsGreedyTarget) {
  model::set_threads(2);
  const model::LoadedModel tgt = load("qwen2.5-coder-1.5b-instruct.gguf", "qwen2.5-coder-1.5b");
  const model::LoadedModel dft = load("qwen2.5-coder-0.5b-instruct.gguf", "qwen2.5-coder-0.5b");
  const model::LoadedModel dft_q4 = load("qwen2.5-coder-0.5b-instruct.gguf", "qwen2.5-coder-0.5b", "q4_1");
  ASSERT_TRUE(tgt.model && dft.model && dft_q4.model);
  ASSERT_NO_THROW(check_tokenizers_compatible(*tgt.tokenizer, *dft.tokenizer));
  for (const char* text : {"Write a C function that returns the maximum of an int array.",
                           "Rename `x` to `width` in: int area(int x, int h) { return x * h; }"}) {
    Request req;
    req.target = tgt.model;
    req.tokenizer = tgt.tokenizer;
    req.draft = dft.model;
    req.draft_tokenizer = dft.tokenizer;
    req.prompt = tgt.tokenizer->encode(tgt.tokenizer->apply_chat_template({{"user", text}}, true), true);
    req.stop.eos_ids = tgt.tokenizer->eos_ids();
    req.stop.max_new_tokens = 48;
    const Result base = create("greedy", {})->generate(req, {});
    const Result spec = create("speculative", Params({{"temperature", "0"}, {"gamma", "4"}}))->generate(req, {});
    EXPECT_EQ(spec.tokens, base.tokens) << text << "\n-- greedy: " << base.text << "\n-- spec: " << spec.text;
    std::printf("  alpha %.3f tau %.2f\n", spec.stats.alpha(), spec.stats.tau());
    // A lossy draft changes how often it is right, never the output.
    Request req_q4 = req;
    req_q4.draft = dft_q4.model;
    const Result q4 = create("speculative", Params({{"temperature", "0"}, {"gamma", "4"}}))->generate(req_q4, {});
    EXPECT_EQ(q4.tokens, base.tokens) << text << " (q4_1 draft)\n-- spec: " << q4.text;
    EXPECT_GT(q4.stats.alpha(), 0.5) << "a Q4_1 copy of the 0.5B should still agree with the 1.5B mostly";
    std::printf("  q4_1 draft: alpha %.3f tau %.2f\n", q4.stats.alpha(), q4.stats.tau());
    // Every registered drafter (trees, self-speculation, retrieval) at a setting that proposes
    // trees where it can, reached through the registry.
    const std::vector<std::map<std::string, std::string>> drafters = {
        {{"drafter", "ngram"}},
        {{"drafter", "model"}, {"verify", "block"}},
        {{"drafter", "tree"}, {"tree_branching", "3,2,1,1"}},
        {{"drafter", "tree"}, {"tree_budget", "auto"}, {"tree_topk", "3"}},
        {{"drafter", "layer_skip"}, {"skip_ratio", "0.3"}, {"skip_search", "3"}},
        {{"drafter", "suffix"}, {"suffix_tree_width", "3"}},
        {{"drafter", "recycling"}},
        {{"drafter", "lookahead"}},
    };
    for (auto params : drafters) {
      params["temperature"] = "0";
      const Result r = create("speculative", Params(params))->generate(req, {});
      EXPECT_EQ(r.tokens, base.tokens) << text << " drafter=" << params["drafter"] << "\n-- spec: " << r.text;
      std::printf("  drafter=%-10s tau %.2f (%lld of %lld draft tokens accepted)\n", params["drafter"].c_str(),
                  r.stats.tau(), (long long)r.stats.n_accepted, (long long)r.stats.n_drafted);
    }
  }
}

}  // namespace
