// experiments/spec_bench.yaml shrunk on SmolLM2-135M drafting for itself: the checks of
// tests/support/spec_bench_cases.h (Spec-Bench's layout and table, greedy equality on every
// answer, the second turn, resume, shards merged). Heavy: its twin on a tiny chat GGUF,
// test_harness_spec_bench_tiny, runs the same checks in the fast tier.
// ctest-heavy: *
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/paths.h"
#include "tests/support/spec_bench_cases.h"

TEST(SpecBenchSmolLM2, ShrunkRunHasTheTableEqualityAndResumes) {
  const std::string model = specdec::testing_support::source_dir() + "/models/smollm2-135m-instruct.gguf";
  ASSERT_TRUE(std::filesystem::exists(model)) << model << " is missing; run scripts/fetch_models.sh smollm2-135m";
  specdec::testing_support::spec_bench_cases::expect_shrunk_spec_bench_run("smollm2-135m", "specdec_spec_bench_smollm2");
}
