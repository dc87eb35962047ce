// Sweep expansion: Cartesian product, pinned params win, strategies only get the keys they
// take, duplicates collapse, keys are stable.
#include <gtest/gtest.h>

#include "core/error.h"
#include "harness/experiment.h"
#include "harness/plan.h"
#include "harness/sweep.h"

using namespace specdec::harness;

namespace {
// A stand-in schema: "greedy" takes temperature only, "speculative" also gamma.
bool accepts(const std::string& name, const std::string& key) {
  if (key == "temperature") return true;
  return name == "speculative" && key == "gamma";
}
}  // namespace

TEST(HarnessSweep, CartesianGridPerStrategy) {
  const auto cfg = parse_experiment(R"(
models: {target: tiny-llama}
prompts: [a]
strategies:
  - {name: greedy, params: {temperature: 0}}
  - speculative
sweep: {gamma: [1, 2, 4, 6, 8], temperature: [0, 0.7, 1.0]}
)",
                                    "s.yaml");
  const auto cells = expand_cells(cfg, accepts);
  // greedy: temperature pinned, gamma not taken -> one cell; speculative: 5 x 3.
  ASSERT_EQ(cells.size(), 1u + 15u);
  EXPECT_EQ(cells[0].key, "greedy|temperature=0");
  EXPECT_TRUE(cells[0].point.empty());
  // first axis varies slowest
  EXPECT_EQ(cells[1].key, "speculative|gamma=1,temperature=0");
  EXPECT_EQ(cells[2].key, "speculative|gamma=1,temperature=0.7");
  EXPECT_EQ(cells[4].key, "speculative|gamma=2,temperature=0");
  EXPECT_EQ(cells[15].key, "speculative|gamma=8,temperature=1.0");
  EXPECT_EQ(cells[15].point.at("gamma"), "8");
  std::set<std::string> keys;
  for (const auto& c : cells) keys.insert(c.key);
  EXPECT_EQ(keys.size(), cells.size());
}

TEST(HarnessSweep, NoSweepIsOneCellPerStrategyAndKeysAreStable) {
  const auto cfg = parse_experiment(R"(
models: {target: tiny-llama}
prompts: [a]
strategies: [{name: speculative, label: s1, params: {gamma: 3}}, {name: speculative, label: s2}]
)",
                                    "s.yaml");
  const auto a = expand_cells(cfg, accepts);
  const auto b = expand_cells(cfg, accepts);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].key, "s1|gamma=3");
  EXPECT_EQ(a[1].key, "s2|");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].key, b[i].key);
  EXPECT_EQ(cell_key("x", {{"b", "2"}, {"a", "1"}}), "x|a=1,b=2");  // sorted, order-independent
}

// interleave: prompt shares one baseline among the cells; what cannot share it is refused at
// plan time with the cell named, before any model loads.
TEST(HarnessSweep, PromptInterleaveNeedsOneSharedBaseline) {
  auto plan_of = [](const std::string& strategies, const std::string& checks = "") {
    return specdec::harness::make_plan(
        parse_experiment("models: {target: tiny-llama, draft: tiny-llama}\nprompts: [hi]\ninterleave: prompt\n"
                         "strategies:\n" + strategies + checks,
                         "x.yaml"),
        false);
  };
  auto error_of = [&](const std::string& strategies, const std::string& checks = "") -> std::string {
    try {
      plan_of(strategies, checks);
    } catch (const specdec::Error& e) {
      return e.what();
    }
    return "<no error>";
  };
  const auto ok = plan_of("  - {name: speculative, label: a, params: {drafter: ngram, temperature: 0}}\n"
                          "  - {name: speculative, label: b, params: {drafter: model, temperature: 0}}\n");
  EXPECT_EQ(ok.baseline, "greedy");
  // Two cells and the shared baseline, each 3 repeats (the default) x 1 prompt + 1 warm-up; in
  // interleave: cell each cell would run its own baseline too (16).
  EXPECT_EQ(ok.n_generations, 12);
  EXPECT_NE(error_of("  - {name: greedy, params: {temperature: 0}}\n").find("is the autoregressive baseline itself"),
            std::string::npos);
  const std::string mixed = error_of("  - {name: speculative, label: a, params: {drafter: ngram, temperature: 0}}\n"
                                     "  - {name: speculative, label: b, params: {drafter: ngram, temperature: 1}}\n",
                                     "checks: {first_token: false, sequence: false}\n");
  EXPECT_NE(mixed.find("share one baseline"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("b|"), std::string::npos) << mixed;  // names the cell
  EXPECT_NE(error_of("  - {name: speculative, params: {drafter: ngram, temperature: 1}}\n")
                .find("use interleave: cell"),
            std::string::npos);
}
