// The equality matrix, through the CLI's command line (specdec generate on
// SmolLM2-135M-Instruct): at temperature 0 every registered drafter x verify mode x processor set
// (none; repetition penalty; penalty + top-k; min-p) prints exactly the tokens of greedy decoding
// with the same processors, on three prompts. The draft model is SmolLM2 requantised to Q4_1
// (--draft-dtype q4_1), a lossy copy, so drafts are also rejected and rollback runs. The first
// prompt is the one on which a token tree with repetition_penalty=1.5 left greedy's text at the
// fourth token before each row was processed with its own root-to-node path.
// The runs go through cli::dispatch in the test program (tests/support/cli_in_process.h); the tiny
// file checks that the binary prints the same. Heavy (132 runs, ~45 s on a 2-core Zen 5 EPYC,
// ~2 minutes when each run was a process): the same logic runs in seconds on a tiny GGUF in
// tests/unit/test_cli_equality_matrix_tiny.cpp; one run's checks are written once for both in
// tests/support/cli_equality_matrix_cases.h.
// ctest-heavy: *
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "speculative/proposer.h"
#include "tests/support/cli_equality_matrix_cases.h"
#include "tests/support/fresh_heads.h"
#include "tests/support/paths.h"
#include "tests/support/smollm2.h"

namespace test_cli_equality_matrix_smollm2 {  // this file's own names (its tests compile in a batch with others)

using namespace specdec::testing_support;

const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";

const CliMatrixTarget& target() {
  static const CliMatrixTarget t{"smollm2-135m", "24", {}, [](const specdec::strategies::DrafterInfo& d) {
                                   return specdec::test_support::fresh_head_values(d, *smollm2().model);
                                 }};
  return t;
}

TEST(CliEqualityMatrix, EveryDrafterAndProcessorSetEqualsGreedyInBothVerifyModes) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  int64_t runs = 0, rejected = 0;
  for (size_t i = 0; i < kMatrixPrompts.size(); ++i)
    for (const auto& set : kProcessorSets) {
      const std::string& prompt = kMatrixPrompts[i];
      const char* verify = i % 2 ? "block" : "tokenwise";
      const nlohmann::json greedy = cli_generate(target(), prompt, set.second);
      ASSERT_TRUE(greedy.contains("tokens")) << greedy.dump();
      for (const auto& d : specdec::strategies::all_drafters()) {
        bool some_rejected = false;
        ASSERT_NO_FATAL_FAILURE(expect_speculative_equals_greedy(target(), prompt, set, d, verify, greedy, &some_rejected));
        rejected += some_rejected;
        ++runs;
      }
    }
  EXPECT_EQ(runs, static_cast<int64_t>(kMatrixPrompts.size() * kProcessorSets.size() *
                                       specdec::strategies::all_drafters().size()));
  EXPECT_GT(rejected, runs / 2) << "most runs should reject some drafts (rollback tested)";
}

}  // namespace test_cli_equality_matrix_smollm2
