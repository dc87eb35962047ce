// The shrunk Spec-Bench run's checks, written once for two models: SmolLM2-135M
// (tests/integration/test_harness_spec_bench_smollm2.cpp, heavy) and a tiny chat GGUF with a
// byte-level tokenizer (tests/unit/test_harness_spec_bench_tiny.cpp, the fast tier's twin).
// experiments/spec_bench.yaml shrunk to 2 questions (one 2-turn MT-bench question, one QA
// question) and 8 tokens per turn, the model drafting for itself: every method runs in
// Spec-Bench's prompt-interleaved layout, the report has Spec-Bench's table, every answer equals
// the autoregressive baseline's token for token, the second turn is asked after the model's own
// first answer, an interrupted run resumes at the first unfinished question, and range shards
// merge into the unsharded run.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "harness/experiment.h"
#include "harness/merge.h"
#include "harness/plan.h"
#include "harness/runner.h"
#include "tests/support/paths.h"

namespace specdec::testing_support::spec_bench_cases {

using namespace specdec::harness;
namespace fs = std::filesystem;
using nlohmann::json;

inline std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

inline std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two questions, 8 tokens, `model` (a name of configs/models.yaml or a GGUF path) as target and
// draft. The tree cell's `tree_budget: auto` picks its node count from the verify times it
// measures, so its tau would change with the machine's load between the unsharded and the
// sharded runs: a fixed budget keeps every figure compared below a function of the tokens alone.
inline std::vector<std::string> shrink(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"models.target=" + model, "models.draft=" + model, "prompts.per_category=1",
                                "prompts.categories=[multi_turn, qa]", "max_new_tokens=8", "warmup=0", "plots=false",
                                "strategies[2].params.tree_budget=12"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

// The run and its checks, in <temp>/out_name (and out_name_shard0, _shard1, _merged, _bad).
inline void expect_shrunk_spec_bench_run(const std::string& model, const std::string& out_name) {
  const ExperimentConfig cfg = load_experiment(specdec::testing_support::source_dir() + "/experiments/spec_bench.yaml", shrink(model));
  ASSERT_EQ(cfg.prompts.size(), 2u);
  ASSERT_EQ(cfg.interleave, "prompt");
  const fs::path out = fs::temp_directory_path() / out_name;
  fs::remove_all(out);
  RunOptions opt;
  opt.out_dir = out.string();
  opt.progress = false;
  const RunOutcome r = run_experiment(cfg, opt);
  EXPECT_EQ(r.unit, "prompts");
  EXPECT_EQ(r.n_finished, 2);
  EXPECT_TRUE(r.checks_passed);

  // Every method, both groups, greedy equality on every answer.
  const json metrics = json::parse(text_of(out / "metrics.json"));
  const size_t n_methods = make_plan(cfg, false).cells.size();
  ASSERT_EQ(metrics["cells"].size(), n_methods);
  for (const auto& c : metrics["cells"]) {
    EXPECT_TRUE(c["categories"].contains("multi_turn")) << c["key"];
    EXPECT_TRUE(c["categories"].contains("qa")) << c["key"];
    EXPECT_GT(c["mean_speedup"].get<double>(), 0) << c["key"];
    EXPECT_GE(c["tau"].get<double>(), 1.0) << c["key"];  // at least the bonus token per forward
    std::printf("  %s: tau %.2f\n", c["key"].get<std::string>().c_str(), c["tau"].get<double>());
    ASSERT_EQ(c["checks"].size(), 1u) << c["key"];
    EXPECT_EQ(c["checks"][0]["name"], "greedy_equality");
    EXPECT_TRUE(c["checks"][0]["pass"].get<bool>()) << c["key"] << ": " << c["checks"][0]["detail"];
  }

  // One line per turn and side: the baseline once, each method once (3 turns in all).
  std::map<std::string, int> per_cell;
  const auto samples = lines_of(out / "samples.jsonl");
  int n_turn2 = 0;
  std::map<std::string, json> first_turn;  // cell -> the multi-turn question's first turn
  for (const auto& l : samples) {
    const json j = json::parse(l);
    ++per_cell[j["cell"].get<std::string>()];
    if (j["category"] == "multi_turn" && !j.contains("turn")) first_turn[j["cell"].get<std::string>()] = j;
  }
  for (const auto& l : samples) {
    const json j = json::parse(l);
    if (!j.contains("turn")) continue;
    ++n_turn2;
    EXPECT_EQ(j["turn"], 1);
    // The second turn's prompt holds the first question, its answer and the follow-up.
    const json& t1 = first_turn.at(j["cell"].get<std::string>());
    EXPECT_GT(j["n_prompt"].get<int64_t>(), t1["n_prompt"].get<int64_t>() + t1["n_generated"].get<int64_t>());
  }
  EXPECT_EQ(n_turn2, static_cast<int>(n_methods) + 1);
  EXPECT_EQ(per_cell.at("baseline"), 3);
  EXPECT_EQ(per_cell.size(), n_methods + 1);
  for (const auto& [cell, n] : per_cell) EXPECT_EQ(n, 3) << cell;

  // Spec-Bench's table: a column per group, mean accepted tokens, overall.
  const std::string report = text_of(out / "report.md");
  EXPECT_NE(report.find("multi_turn"), std::string::npos);
  EXPECT_NE(report.find("mean accepted tokens"), std::string::npos);
  EXPECT_NE(report.find("overall"), std::string::npos);
  EXPECT_NE(report.find("another model on other machines"), std::string::npos);  // report.context

  // A finished run resumes to nothing new.
  opt.resume = true;
  const RunOutcome again = run_experiment(cfg, opt);
  EXPECT_EQ(again.n_resumed, 2);
  EXPECT_EQ(lines_of(out / "samples.jsonl").size(), samples.size());

  // Interrupted after the first question (its units.jsonl line is the commit point; the
  // second question's samples without it are dropped): the resume reruns only the second.
  const auto units = lines_of(out / "units.jsonl");
  ASSERT_EQ(units.size(), 2u);
  std::ofstream(out / "units.jsonl", std::ios::trunc) << units[0] << "\n";
  const RunOutcome resumed = run_experiment(cfg, opt);
  EXPECT_EQ(resumed.n_resumed, 1);
  EXPECT_EQ(resumed.n_finished, 2);
  EXPECT_EQ(lines_of(out / "samples.jsonl").size(), samples.size());
  const json again_metrics = json::parse(text_of(out / "metrics.json"));
  for (size_t i = 0; i < n_methods; ++i)
    EXPECT_TRUE(again_metrics["cells"][i]["checks"][0]["pass"].get<bool>()) << again_metrics["cells"][i]["key"];

  // Sharded by question range on "two machines", then merged: the same questions, the same
  // tokens (so the same mean accepted tokens) and the same checks as the unsharded run.
  std::vector<std::string> shard_dirs;
  for (const char* range : {"0:1", "1:"}) {
    ExperimentConfig shard = load_experiment(specdec::testing_support::source_dir() + "/experiments/spec_bench.yaml",
                                             shrink(model, {std::string("prompts.range=") + range}));
    ASSERT_EQ(shard.prompts.size(), 1u);
    shard_dirs.push_back((out.string() + "_shard") + range[0]);
    fs::remove_all(shard_dirs.back());
    RunOptions so;
    so.out_dir = shard_dirs.back();
    so.progress = false;
    EXPECT_EQ(run_experiment(shard, so).n_finished, 1);
  }
  const fs::path merged_dir = out.string() + "_merged";
  fs::remove_all(merged_dir);
  const ExperimentConfig merged = merge_shards(shard_dirs, merged_dir.string());
  ASSERT_EQ(merged.prompts.size(), 2u);
  RunOptions mo;
  mo.out_dir = merged_dir.string();
  mo.resume = true;
  mo.progress = false;
  const RunOutcome m = run_experiment(merged, mo);
  EXPECT_EQ(m.n_resumed, 2);  // nothing generated
  EXPECT_EQ(lines_of(merged_dir / "samples.jsonl").size(), samples.size());
  const json merged_metrics = json::parse(text_of(merged_dir / "metrics.json"));
  ASSERT_EQ(merged_metrics["cells"].size(), n_methods);
  for (size_t i = 0; i < n_methods; ++i) {
    const auto& c = merged_metrics["cells"][i];
    EXPECT_EQ(c["n_prompts"], 2) << c["key"];
    EXPECT_DOUBLE_EQ(c["tau"].get<double>(), metrics["cells"][i]["tau"].get<double>()) << c["key"];
    EXPECT_TRUE(c["checks"][0]["pass"].get<bool>()) << c["key"];
  }
  // Overlapping shards are refused, naming the prompt.
  try {
    merge_shards({shard_dirs[0], shard_dirs[0]}, out.string() + "_bad");
    ADD_FAILURE() << "merging a shard with itself was accepted";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is in both"), std::string::npos) << e.what();
  }
  for (const auto& d : shard_dirs) fs::remove_all(d);
  fs::remove_all(merged_dir);
  fs::remove_all(out.string() + "_bad");
  fs::remove_all(out);
}

}  // namespace specdec::testing_support::spec_bench_cases
