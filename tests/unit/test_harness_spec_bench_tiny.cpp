// experiments/spec_bench.yaml shrunk on a tiny chat GGUF with a byte-level tokenizer
// (tests/support/tiny_gguf.h) drafting for itself, in seconds: the checks of
// tests/support/spec_bench_cases.h (Spec-Bench's layout and table, greedy equality on every
// answer, the second turn after the model's own first answer, resume, range shards merged), the
// fast tier's twin of test_harness_spec_bench_smollm2 (heavy).
#include <gtest/gtest.h>

#include "tests/support/command.h"
#include "tests/support/spec_bench_cases.h"
#include "tests/support/tiny_gguf.h"

TEST(SpecBenchTiny, ShrunkRunHasTheTableEqualityAndResumes) {
  static const specdec::testing_support::ProcessDir dir("specdec_spec_bench_tiny");
  specdec::testing::TinyGgufOptions o;
  o.chat = true;      // Spec-Bench's prompts are chat turns
  o.n_ctx = 4096;     // a byte per token: the second turn holds the first question and answer
  const std::string model = specdec::testing::write_tiny_gguf((dir.path / "tiny.gguf").string(), o);
  specdec::testing_support::spec_bench_cases::expect_shrunk_spec_bench_run(model, "specdec_spec_bench_tiny");
}
