// Sweep expansion: Cartesian product, pinned params win, strategies only get the keys they
// take, duplicates collapse, keys are stable.
#include <gtest/gtest.h>

#include "core/error.h"
#include "harness/experiment.h"
#include "harness/plan.h"
#include "harness/sweep.h"
#include "speculative/params.h"

using namespace specdec::harness;

namespace {
// A stand-in schema: "greedy" takes temperature only, "speculative" also gamma.
bool accepts(const std::string& name, const std::string& key) {
  if (key == "temperature") return true;
  return name == "speculative" && key == "gamma";
}
// The stand-in asked as expand_cells asks: by the entry's index in the file.
AcceptsParam schema(const ExperimentConfig& cfg) {
  return [&cfg](size_t entry, const std::string& key) { return accepts(cfg.strategies[entry].name, key); };
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
  const auto cells = expand_cells(cfg, schema(cfg));
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
  const auto a = expand_cells(cfg, schema(cfg));
  const auto b = expand_cells(cfg, schema(cfg));
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

// batch_size is the harness's own parameter: every strategy takes it (sweep, params, top level),
// it shows in the cell key and PlannedCell::batch_size, and never reaches the strategy's params.
// What batched runs cannot do is refused at plan time, naming the cell or the key.
TEST(HarnessSweep, BatchSizeIsASweepableHarnessKey) {
  auto plan_of = [](const std::string& yaml) { return specdec::harness::make_plan(parse_experiment(yaml, "b.yaml"), false); };
  auto error_of = [&](const std::string& yaml) -> std::string {
    try {
      plan_of(yaml);
    } catch (const specdec::Error& e) {
      return e.what();
    }
    return "<no error>";
  };
  const std::string head = "models: {target: tiny-llama, draft: tiny-llama}\nprompts: [a, b]\n";
  const auto plan = plan_of(head +
                            "strategies: [greedy, {name: speculative, label: pinned, params: {batch_size: 2}}, "
                            "{name: speculative, params: {drafter: ngram}}]\n"
                            "sweep: {batch_size: [1, 4]}\nbatch_size: 3\n");
  ASSERT_EQ(plan.cells.size(), 2u + 1u + 2u);
  EXPECT_EQ(plan.cells[0].cell.key, "greedy|batch_size=1");
  EXPECT_EQ(plan.cells[0].batch_size, 1);
  EXPECT_EQ(plan.cells[1].batch_size, 4);
  EXPECT_EQ(plan.cells[2].cell.key, "pinned|batch_size=2");  // pinned wins over the sweep
  EXPECT_EQ(plan.cells[2].batch_size, 2);
  for (const auto& pc : plan.cells) EXPECT_FALSE(pc.resolved.has("batch_size")) << pc.cell.key;
  const auto top = plan_of(head + "strategies: [greedy]\nbatch_size: 3\n");
  EXPECT_EQ(top.cells[0].batch_size, 3);
  EXPECT_EQ(top.cells[0].cell.key, "greedy|");
  EXPECT_NE(format_plan(parse_experiment(head + "strategies: [greedy]\nbatch_size: 3\n", "b.yaml"), top)
                .find("batch_size 3"),
            std::string::npos);

  const std::string zero = error_of(head + "strategies: [greedy]\nsweep: {batch_size: [1, 0]}\n");
  EXPECT_NE(zero.find("sweep.batch_size"), std::string::npos) << zero;
  EXPECT_NE(zero.find("'0'"), std::string::npos) << zero;
  const std::string pinned = error_of(head + "strategies: [{name: greedy, params: {batch_size: two}}]\n");
  EXPECT_NE(pinned.find("strategies[0].params"), std::string::npos) << pinned;
  EXPECT_NE(pinned.find("'two'"), std::string::npos) << pinned;
  for (const char* bad : {"batch_size: 0\n", "batch_size: 1025\n", "checks: {batch_size: 0}\n"}) {
    const std::string e = error_of(head + "strategies: [greedy]\n" + bad);
    EXPECT_NE(e.find("batch_size"), std::string::npos) << bad << ": " << e;
  }
  // Token trees batch too (one tree per sequence in the target forward).
  EXPECT_EQ(plan_of(head + "strategies: [{name: speculative, params: {drafter: tree}}]\nbatch_size: 2\n")
                .cells[0].batch_size,
            2);
  const std::string turns = error_of(
      "models: {target: tiny-llama}\nprompts: [{turns: [a, b], chat: true}]\n"
      "strategies: [greedy]\nbatch_size: 2\n");
  EXPECT_NE(turns.find("single-turn"), std::string::npos) << turns;
  const std::string prompt_mode = error_of(head + "interleave: prompt\nstrategies: [{name: speculative, params: "
                                                  "{drafter: ngram, temperature: 0}}]\nbatch_size: 2\n");
  EXPECT_NE(prompt_mode.find("interleave: cell"), std::string::npos) << prompt_mode;
}

// The plan resolves each strategy entry once and hands on what it resolved: a cell that no sweep
// value changes carries its entry's typed values, a swept cell its own, resolved once for each set
// of values, with what its strategy needs (the metrics read its draft length), and cells with one
// baseline share it.
TEST(HarnessSweep, CellsCarryTheirEntrysResolvedParams) {
  using specdec::strategies::SpeculativeParams;
  const auto plan = make_plan(parse_experiment(R"(
models: {target: tiny-llama}
prompts: [a]
strategies:
  - {name: speculative, label: pinned, params: {drafter: ngram, gamma: 3, temperature: 0}}
  - {name: speculative, label: swept, params: {drafter: ngram, temperature: 0}}
sweep: {batch_size: [1, 2], gamma: [2, 5]}
)",
                                                  "r.yaml"),
                              false);
  ASSERT_EQ(plan.cells.size(), 2u + 4u);
  // pinned: gamma pinned, batch_size never reaches the strategy: both cells hold the entry's struct.
  EXPECT_EQ(plan.cells[0].cell.key, "pinned|batch_size=1,drafter=ngram,gamma=3,temperature=0");
  EXPECT_EQ(&plan.cells[0].resolved.typed<SpeculativeParams>(), &plan.cells[1].resolved.typed<SpeculativeParams>());
  EXPECT_EQ(plan.cells[1].needs.draft_length, 3);
  for (size_t i = 2; i < plan.cells.size(); ++i) {
    const auto& pc = plan.cells[i];
    const int64_t gamma = std::stoll(pc.cell.point.at("gamma"));
    EXPECT_EQ(pc.resolved.typed<SpeculativeParams>().gamma, gamma) << pc.cell.key;
    EXPECT_EQ(pc.needs.draft_length, gamma) << pc.cell.key;
    EXPECT_EQ(pc.needs.drafter, "ngram") << pc.cell.key;
    EXPECT_FALSE(pc.needs.draft_model) << pc.cell.key;
  }
  // swept: the same gamma at two batch sizes is resolved once.
  EXPECT_EQ(plan.cells[4].cell.key, "swept|batch_size=2,drafter=ngram,gamma=2,temperature=0");
  EXPECT_EQ(&plan.cells[2].resolved.typed<SpeculativeParams>(), &plan.cells[4].resolved.typed<SpeculativeParams>());
  // Every cell is at temperature 0: one greedy baseline, resolved once, for all of them.
  for (const auto& pc : plan.cells) {
    EXPECT_EQ(pc.baseline, "greedy") << pc.cell.key;
    EXPECT_EQ(&pc.baseline_params.typed<specdec::sampling::ProcessorConfig>(),
              &plan.cells[0].baseline_params.typed<specdec::sampling::ProcessorConfig>())
        << pc.cell.key;
  }
}
