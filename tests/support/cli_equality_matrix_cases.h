#pragma once
// The CLI equality matrix, written once for its two files:
//   tests/unit/test_cli_equality_matrix_tiny.cpp            a tiny GGUF: each (drafter, processor
//                                                           set) pair once, rotated over prompts
//                                                           and verify modes (seconds)
//   tests/integration/test_cli_equality_matrix_smollm2.cpp  SmolLM2-135M: every pair on every
//                                                           prompt (heavy, ~1 minute)
// Both files go to one test program (tests_harness), where a suite may be defined once: their
// TEST lines stay in each file, under their own suite names, and call what is here.
// One run: `specdec generate` at temperature 0 with a drafter, a processor set and a verify mode
// prints exactly the tokens of greedy decoding with the same processors, and stats.verify_modes is
// {greedy} whenever something was drafted. The runs go through cli::dispatch in the test program
// (tests/support/cli_in_process.h: the CLI's main() less its process start, ~0.35-1 s a run, more
// than a tiny model's whole generation); the tiny file checks that the binary prints the same.
// The draft model is the target's own file requantised to Q4_1 (--draft-dtype q4_1, a lossy copy)
// and eagle and medusa get untrained heads, so that drafts are also rejected and rollback runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "speculative/proposer.h"
#include "tests/support/cli_in_process.h"
#include "tests/support/command.h"
#include "tests/support/paths.h"

namespace specdec::testing_support {

struct CliMatrixTarget {
  std::string model;                  // --model, and --draft for the drafters that need a draft model
  std::string max_new_tokens;         // --max-new-tokens
  std::vector<std::string> options;   // further generate options
  // {head_param: folder} of an untrained head of drafter d's kind (empty for drafters without one).
  std::function<std::map<std::string, std::string>(const strategies::DrafterInfo& d)> heads;
};

// The first prompt is the one on which a token tree with repetition_penalty=1.5 left greedy's text
// (SmolLM2, at the fourth token) before each row was processed with its own root-to-node path.
inline const std::vector<std::string> kMatrixPrompts = {
    "Write a short list of fruits: apple, banana, apple, banana,",
    "def is_prime(n):\n    \"\"\"Return True when n is a prime number.\"\"\"\n",
    "Repeat exactly: \"a b c == a b c == a b c == 1111111111\"",
};

inline const std::vector<std::pair<std::string, std::vector<std::string>>> kProcessorSets = {
    {"none", {}},
    {"repetition penalty", {"--set", "repetition_penalty=1.5"}},
    {"penalty + top-k", {"--set", "repetition_penalty=1.3", "--set", "top_k=5"}},
    {"min-p", {"--set", "min_p=0.1"}},
};

// Where a run's command line goes: cli::dispatch in this program, or the binary a user's shell
// starts, build/specdec_with_examples (the CLI with the worked examples registered,
// examples/main.cpp: the drafters this matrix walks are the test program's registry, which has them
// too, tests/support/examples_main.cpp).
enum class Via { kInProcess, kBinary };

// `specdec generate ... --json --set temperature=0 EXTRA` on the target: the JSON object of the
// last output line (exit code 0 expected).
inline nlohmann::json cli_generate(const CliMatrixTarget& t, const std::string& prompt,
                                   const std::vector<std::string>& extra, Via via = Via::kInProcess) {
  std::vector<std::string> args = {"generate", "--model", t.model, "--prompt", prompt, "--max-new-tokens",
                                   t.max_new_tokens, "--json"};
  args.insert(args.end(), t.options.begin(), t.options.end());
  args.insert(args.end(), {"--set", "temperature=0"});
  args.insert(args.end(), extra.begin(), extra.end());
  const std::string cmd = command_line(binary_dir() + "/specdec_with_examples", args);
  const Output o = via == Via::kBinary ? shell(cmd) : run_in_process(args);
  EXPECT_EQ(o.code, 0) << cmd << "\n" << o.text;
  const auto brace = o.text.rfind("\n{");
  return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1), nullptr, false);
}

// Drafter d with processor set `set` in verify mode `verify` on `prompt`: its tokens equal
// greedy's (`greedy`, cli_generate with the set alone) and its verify modes are {greedy} when it
// drafted. *rejected: whether it rejected some drafts. Call through ASSERT_NO_FATAL_FAILURE.
inline void expect_speculative_equals_greedy(const CliMatrixTarget& t, const std::string& prompt,
                                             const std::pair<std::string, std::vector<std::string>>& set,
                                             const strategies::DrafterInfo& d, const std::string& verify,
                                             const nlohmann::json& greedy, bool* rejected) {
  std::vector<std::string> args = set.second;
  args.insert(args.end(), {"--strategy", "speculative", "--set", "drafter=" + d.name, "--set", "verify=" + verify,
                           "--set", "repeat_min_run=1"});
  if (d.needs_draft_model) args.insert(args.end(), {"--draft", t.model, "--draft-dtype", "q4_1"});
  if (d.name == "tree") args.insert(args.end(), {"--set", "tree_branching=3,2,1"});
  for (const auto& [key, dir] : t.heads(d)) args.insert(args.end(), {"--set", key + "=" + dir});
  const nlohmann::json spec = cli_generate(t, prompt, args);
  const std::string what = set.first + ", drafter " + d.name + ", verify " + verify + ", prompt " + prompt;
  ASSERT_TRUE(spec.contains("tokens")) << what << ": " << spec.dump();
  EXPECT_EQ(spec["tokens"], greedy["tokens"]) << what;
  const auto& st = spec["stats"];
  const int64_t drafted = st["n_drafted"].get<int64_t>(), accepted = st["n_accepted"].get<int64_t>();
  EXPECT_EQ(st["verify_modes"].size(), drafted > 0 ? 1u : 0u) << what << ": " << st.dump();
  if (drafted > 0) EXPECT_TRUE(st["verify_modes"].contains("greedy")) << what;
  *rejected = accepted < drafted;
  std::printf("%-10s %-18s %-9s: drafted %3lld accepted %3lld\n", d.name.c_str(), set.first.c_str(), verify.c_str(),
              static_cast<long long>(drafted), static_cast<long long>(accepted));
}

}  // namespace specdec::testing_support
