// The quickstart experiment on the real SmolLM2-135M-Instruct, shrunk by overrides so it
// runs in about a minute: every strategy family runs, greedy speculative equals greedy (the
// target's own Q4_1 copy drafting a fixed chain, and the controller choosing between n-gram, that
// copy and no draft), that copy agrees with the target most of the time at temperature 0, and the
// sampled fixed chain's law checks pass.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/experiment.h"
#include "harness/runner.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec::harness;
namespace fs = std::filesystem;

TEST(HarnessSmolLM2, ShrunkQuickstartRunsAndPassesChecks) {
  const std::string model = source_dir() + "/models/smollm2-135m-instruct.gguf";
  ASSERT_TRUE(fs::exists(model)) << model << " is missing; run scripts/fetch_models.sh smollm2-135m";
  const std::string out = (fs::temp_directory_path() / "specdec_smollm2_quickstart").string();
  fs::remove_all(out);
  const auto cfg = load_experiment(source_dir() + "/experiments/quickstart.yaml",
                                   {"repeats=1", "warmup=0", "max_new_tokens=12", "prompts.limit=2", "plots=false",
                                    "checks.first_token.samples=60", "checks.sequence.samples=30",
                                    "checks.sequence.length=3"});
  RunOptions opt;
  opt.out_dir = out;
  opt.progress = false;
  const auto r = run_experiment(cfg, opt);
  EXPECT_EQ(r.n_finished, 7);
  EXPECT_TRUE(r.checks_passed);
  std::ifstream in(fs::path(out) / "metrics.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto metrics = nlohmann::json::parse(ss.str());
  int n_greedy_checks = 0, n_law_checks = 0;
  for (const auto& c : metrics["cells"]) {
    EXPECT_GT(c["tok_s"]["median"].get<double>(), 0) << c["key"];
    for (const auto& k : c["checks"]) {
      EXPECT_TRUE(k["pass"].get<bool>()) << c["key"] << ": " << k["detail"];
      n_greedy_checks += k["name"] == "greedy_equality";
      n_law_checks += k["name"] != "greedy_equality" && c["label"] == "spec-q4_1";
    }
    // The Q4_1 copy drafts the target's argmax most of the time at temperature 0 (the quickstart's
    // point: a cheap draft that agrees). A draft model that is not the target's copy, or a
    // requantisation gone wrong, falls far below.
    if (c["label"] == "spec-q4_1" && c["params"]["temperature"] == "0")
      EXPECT_GE(c["alpha"].get<double>(), 0.3) << c["key"];  // measured 0.54 on these 2 x 12 tokens (~25 drafted: the
      // Q4_1 draft's near-ties fall by the int8 kernel, AVX2 or AVX-512; a broken draft accepts ~0)
  }
  EXPECT_EQ(n_greedy_checks, 2);  // spec-q4_1 and spec-auto at temperature 0
  EXPECT_EQ(n_law_checks, 2);     // spec-q4_1 at 0.7: first token and sequence
  fs::remove_all(out);
}
