// The equality matrix, through the CLI as a user runs it (build/specdec generate on
// SmolLM2-135M-Instruct): at temperature 0 every registered drafter x verify mode x processor set
// (none; repetition penalty; penalty + top-k; min-p) prints exactly the tokens of greedy decoding
// with the same processors, on three prompts. The draft model is SmolLM2 requantised to Q4_1
// (--draft-dtype q4_1), a lossy copy, so drafts are also rejected and rollback runs. The first
// prompt is the one on which a token tree with repetition_penalty=1.5 left greedy's text at the
// fourth token before each row was processed with its own root-to-node path.
// Heavy (132 CLI processes, ~3 minutes): the same logic runs in seconds on a tiny GGUF in
// tests/unit/test_cli_equality_matrix_tiny.cpp.
// ctest-heavy: *
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strategies/drafters.h"
#include "tests/support/command.h"
#include "tests/support/fresh_heads.h"
#include "tests/support/smollm2.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::source_dir;

namespace {

using specdec::testing_support::smollm2;

const std::string kBin = binary_dir() + "/specdec";
const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";

const std::vector<std::string> kPrompts = {
    "Write a short list of fruits: apple, banana, apple, banana,",
    "def is_prime(n):\n    \"\"\"Return True when n is a prime number.\"\"\"\n",
    "Repeat exactly: \"a b c == a b c == a b c == 1111111111\"",
};

const std::vector<std::pair<std::string, std::vector<std::string>>> kProcessorSets = {
    {"none", {}},
    {"repetition penalty", {"--set", "repetition_penalty=1.5"}},
    {"penalty + top-k", {"--set", "repetition_penalty=1.3", "--set", "top_k=5"}},
    {"min-p", {"--set", "min_p=0.1"}},
};

using specdec::testing_support::Output;
using specdec::testing_support::quote;
using specdec::testing_support::shell;

// `specdec generate ... --json`: the JSON object of the last output line.
nlohmann::json generate(const std::string& prompt, const std::vector<std::string>& extra) {
  std::string cmd = quote(kBin);
  for (const std::string& a : {std::string("generate"), std::string("--model"), std::string("smollm2-135m"),
                               std::string("--prompt"), prompt, std::string("--max-new-tokens"), std::string("24"),
                               std::string("--json"), std::string("--set"), std::string("temperature=0")})
    cmd += " " + quote(a);
  for (const auto& a : extra) cmd += " " + quote(a);
  const Output o = shell(cmd);
  EXPECT_EQ(o.code, 0) << cmd << "\n" << o.text;
  const auto brace = o.text.rfind("\n{");
  return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1), nullptr, false);
}

TEST(CliEqualityMatrix, EveryDrafterAndProcessorSetEqualsGreedyInBothVerifyModes) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  int64_t runs = 0, rejected = 0;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    for (const auto& [set_name, set] : kProcessorSets) {
      const std::string& prompt = kPrompts[i];
      const char* verify = i % 2 ? "block" : "tokenwise";
      const nlohmann::json greedy = generate(prompt, set);
      ASSERT_TRUE(greedy.contains("tokens")) << greedy.dump();
      for (const auto& d : specdec::strategies::all_drafters()) {
        std::vector<std::string> args = set;
        args.insert(args.end(), {"--strategy", "speculative", "--set", "drafter=" + d.name, "--set",
                                 std::string("verify=") + verify, "--set", "repeat_min_run=1"});
        if (d.needs_draft_model) args.insert(args.end(), {"--draft", "smollm2-135m", "--draft-dtype", "q4_1"});
        if (d.name == "tree") args.insert(args.end(), {"--set", "tree_branching=3,2,1"});
        for (const auto& [key, dir] : specdec::test_support::fresh_head_values(d, *smollm2().model))
          args.insert(args.end(), {"--set", key + "=" + dir});  // an untrained head: many rejections
        const nlohmann::json spec = generate(prompt, args);
        const std::string what = set_name + ", drafter " + d.name + ", verify " + verify + ", prompt " + prompt;
        ASSERT_TRUE(spec.contains("tokens")) << what << ": " << spec.dump();
        EXPECT_EQ(spec["tokens"], greedy["tokens"]) << what;
        const auto& st = spec["stats"];
        EXPECT_EQ(st["verify_modes"].size(), st["n_drafted"].get<int64_t>() > 0 ? 1u : 0u) << what;
        if (st["n_drafted"].get<int64_t>() > 0) EXPECT_TRUE(st["verify_modes"].contains("greedy")) << what;
        rejected += st["n_accepted"].get<int64_t>() < st["n_drafted"].get<int64_t>();
        ++runs;
      }
    }
  EXPECT_EQ(runs, static_cast<int64_t>(kPrompts.size() * kProcessorSets.size() *
                                       specdec::strategies::all_drafters().size()));
  EXPECT_GT(rejected, runs / 2) << "most runs should reject some drafts (rollback tested)";
}

}  // namespace
