// The registered extensions, run as a user runs them: the CLI on SmolLM2-135M-Instruct by its
// catalog name. The CLI is build/specdec_with_examples, the one a user builds with their own
// strategies registered (examples/main.cpp); this executable registers the same examples
// (tests/support/examples_main.cpp), so its registry lists what the binary runs.
//  - the example strategy `annealed` (examples/annealed_sampling.cpp): seeded
//    runs repeat, and it is listed by `specdec strategies`;
//  - every registered drafter that needs no draft model (the example `repeat_last`, `suffix`,
//    `ngram`, ...) and `model` with the model as its own draft: greedy speculative decoding
//    prints the tokens of greedy decoding.
// Heavy (~50 s of CLI processes on SmolLM2; the fast tier's real-model CLI test is
// test_cli_harness): the same runs on a crafted tiny GGUF are in tests/unit/test_bad_inputs.cpp
// (annealed and repeat_last through build/specdec_with_examples, repeat_last, suffix and ngram
// printing greedy's tokens), the registries' side in tests/unit/test_strategies_example.cpp.
// ctest-heavy: *
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "speculative/proposer.h"
#include "tests/support/command.h"
#include "tests/support/fresh_heads.h"
#include "tests/support/smollm2.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::source_dir;

namespace test_cli_extensions_smollm2 {  // this file's own names (its tests compile in a batch with others)

using specdec::testing_support::smollm2;

const std::string kBin = binary_dir() + "/specdec_with_examples";
const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";
// Text the model copies (a run of one digit token included): the drafters that look back at the
// prompt, and repeat_last, have something to find.
const std::string kPrompt = "Repeat exactly: \"a b c == a b c == a b c == 1111111111\"";

using specdec::testing_support::Output;
using specdec::testing_support::shell;

Output run(const std::vector<std::string>& args) { return shell(specdec::testing_support::command_line(kBin, args)); }

// `specdec generate ... --json` on SmolLM2: the JSON object of the last output line.
nlohmann::json generate(std::vector<std::string> extra) {
  std::vector<std::string> a = {"generate", "--model", "smollm2-135m", "--chat", "--prompt", kPrompt,
                                "--max-new-tokens", "32", "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  const Output o = run(a);
  EXPECT_EQ(o.code, 0) << o.text;
  const auto brace = o.text.rfind("\n{");
  return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1), nullptr, false);
}

class CliExtensions : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  }
};

TEST_F(CliExtensions, AnnealedStrategyRunsSeededFromTheCli) {
  const auto a = generate({"--strategy", "annealed", "--set", "t_end=0.1", "--seed", "7"});
  const auto b = generate({"--strategy", "annealed", "--set", "t_end=0.1", "--seed", "7"});
  ASSERT_TRUE(a.contains("tokens")) << a.dump();
  EXPECT_EQ(a["stats"]["strategy"], "annealed");
  EXPECT_GT(a["tokens"].size(), 0u);
  EXPECT_EQ(a["tokens"], b["tokens"]);
  const Output list = run({"strategies", "--name", "annealed"});
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.text.find("t_start=1.2"), std::string::npos) << list.text;
}

TEST_F(CliExtensions, GreedySpeculativeEqualsGreedyWithEveryDrafter) {
  const auto greedy = generate({"--set", "temperature=0"});
  ASSERT_TRUE(greedy.contains("tokens")) << greedy.dump();
  ASSERT_GE(greedy["tokens"].size(), 8u);
  for (const auto& d : specdec::strategies::all_drafters()) {
    std::vector<std::string> args = {"--strategy", "speculative", "--set", "temperature=0", "--set", "drafter=" + d.name};
    if (d.needs_draft_model) args.insert(args.end(), {"--draft", "smollm2-135m"});  // self-drafting
    for (const auto& [key, dir] : specdec::test_support::fresh_head_values(d, *smollm2().model))
      args.insert(args.end(), {"--set", key + "=" + dir});
    const auto spec = generate(args);
    ASSERT_TRUE(spec.contains("tokens")) << d.name << ": " << spec.dump();
    EXPECT_EQ(spec["tokens"], greedy["tokens"]) << d.name;
    if (d.name == "suffix" || d.name == "repeat_last")  // the prompt gives both something to copy
      EXPECT_GT(spec["stats"]["n_accepted"].get<int64_t>(), 0) << d.name;
  }
}

// dtype q4_1 is lossy, so only as a draft does it keep the output: greedy speculative decoding
// with the model requantised as its own draft (--draft-dtype) prints greedy decoding's tokens,
// and the draft's tokens are accepted.
TEST_F(CliExtensions, RequantisedDraftKeepsGreedyOutput) {
  const auto greedy = generate({"--set", "temperature=0"});
  ASSERT_TRUE(greedy.contains("tokens")) << greedy.dump();
  const auto spec = generate({"--strategy", "speculative", "--set", "temperature=0", "--draft", "smollm2-135m",
                              "--draft-dtype", "q4_1"});
  ASSERT_TRUE(spec.contains("tokens")) << spec.dump();
  EXPECT_EQ(spec["tokens"], greedy["tokens"]);
  EXPECT_GT(spec["stats"]["n_accepted"].get<int64_t>(), 0);
  // The flag reaches the draft's load (and only the draft's: the target stays valid).
  const Output bad = run({"generate", "--model", "smollm2-135m", "--draft", "smollm2-135m", "--strategy", "speculative",
                          "--draft-dtype", "q3", "--prompt", "x", "--max-new-tokens", "2"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.text.find("'q3'"), std::string::npos) << bad.text;
  EXPECT_NE(bad.text.find("q4_1"), std::string::npos) << bad.text;
}

}  // namespace test_cli_extensions_smollm2
