// Run folder durability (commit, torn lines, pruning for --resume) and the contents of
// metrics.json, summary.csv, report.md and the compare table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "harness/report.h"
#include "harness/results.h"

using namespace specdec;
using namespace specdec::harness;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("specdec_test_" + name);
  fs::remove_all(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CellMetrics make_cell(const std::string& label, const std::string& gamma, double speedup) {
  CellMetrics m;
  m.cell.label = label;
  m.cell.strategy = "speculative";
  m.cell.params = {{"gamma", gamma}, {"temperature", "0"}};
  m.cell.point = {{"gamma", gamma}};
  m.cell.key = cell_key(label, m.cell.params);
  m.baseline = "greedy";
  m.n_prompts = 2;
  m.n_repeats = 3;
  m.tok_s = {40, 38, 42, 39, 41};
  m.speedup = {speedup, speedup - 0.1, speedup + 0.1, speedup - 0.05, speedup + 0.05};
  m.gamma = std::stoll(gamma);
  m.n_drafted = 100;
  m.n_accepted = 80;
  m.alpha = 0.8;
  m.tau = 3.1;
  m.acceptance_per_position = {0.9, 0.8, 0.7};
  m.cost_ratio = 0.1;
  m.predicted_speedup = 2.4;
  m.measured_over_predicted = speedup / 2.4;
  m.categories["code"] = {1, 44, 1.5};
  m.categories["prose"] = {1, 36, 1.2};
  CheckOutcome c;
  c.name = "greedy_equality";
  c.pass = true;
  c.n_samples = 2;
  c.detail = "exact-match rate 100.0% (2/2)";
  m.checks.push_back(c);
  return m;
}

}  // namespace

TEST(HarnessResults, CellJsonRoundTrip) {
  const auto m = make_cell("spec", "4", 1.7);
  const auto back = cell_from_json(to_json(m));
  EXPECT_EQ(to_json(back), to_json(m));
  EXPECT_THROW(cell_from_json(nlohmann::json{{"key", "x"}}), Error);
}

TEST(HarnessResults, CommitLoadTornLineAndPrune) {
  const fs::path dir = fresh_dir("store");
  RunStore store(dir.string());
  EXPECT_TRUE(store.load_finished().empty());
  const auto a = make_cell("spec", "2", 1.2), b = make_cell("spec", "4", 1.6);
  store.commit_cell({{{"cell", a.cell.key}, {"i", 0}}, {{"cell", a.cell.key}, {"i", 1}}}, a);
  store.commit_cell({{{"cell", b.cell.key}, {"i", 0}}}, b);
  // An interrupted third cell: samples written, record torn mid-line.
  append_durable(store.path("samples.jsonl"), "{\"cell\": \"spec|gamma=8\", \"i\": 0}\n{\"cell\": \"spe");
  append_durable(store.path("cells.jsonl"), "{\"key\": \"spec|gam");
  const auto done = store.load_finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].cell.key, a.cell.key);
  EXPECT_EQ(done[1].cell.key, b.cell.key);
  EXPECT_EQ(store.prune_samples({a.cell.key, b.cell.key}), 2);
  EXPECT_EQ(slurp(store.path("samples.jsonl")),
            "{\"cell\":\"" + a.cell.key + "\",\"i\":0}\n{\"cell\":\"" + a.cell.key + "\",\"i\":1}\n{\"cell\":\"" +
                b.cell.key + "\",\"i\":0}\n");
  // A malformed record that is not the last line is corruption, reported with its line.
  append_durable(store.path("cells.jsonl"), "\n" + to_json(a).dump() + "\n");
  try {
    store.load_finished();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cells.jsonl:3"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(HarnessResults, SummaryCsvAndReport) {
  std::vector<CellMetrics> cells = {make_cell("spec", "2", 1.25), make_cell("spec", "4", 1.5)};
  cells[1].checks[0].pass = false;
  cells[1].checks[0].detail = "exact-match rate 50.0% (1/2); prompt p1 differs at position 3";
  const std::string csv = summary_csv(cells);
  std::istringstream in(csv);
  std::string header, row1, row2, extra;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_EQ(header.rfind("key,label,strategy,params,n_prompts,n_repeats,tok_s_median", 0), 0u);
  EXPECT_EQ(row1, "\"spec|gamma=2,temperature=0\",spec,speculative,gamma=2 temperature=0,2,3,40.000,38.000,42.000,"
                  "0.000,0.000,greedy,0.000,1.2500,1.1500,1.3500,0.8000,3.1000,2,0.1000,2.4000,0.5208,pass");
  EXPECT_NE(row2.find(",FAIL"), std::string::npos);

  RunInfo info{"exp", "a test", "20260101-000000", "tiny-llama", "", nlohmann::json{{"cpu_model", "CPU X"}}, 3};
  const std::string md = report_markdown(info, cells, {"speedup_vs_gamma.png"});
  for (const char* s : {"# exp — run 20260101-000000", "CPU X", "cells finished: 2 of 3", "**SOME FAIL**",
                        "| spec | gamma=2 temperature=0 | 40.00 |", "1.250 [1.150, 1.350]", "| 0.800 | 3.100 |",
                        "## Acceptance by draft position", "| 0.900 | 0.800 | 0.700 |", "| code | 1 | 44.00 | 1.500 |",
                        "prompt p1 differs at position 3", "**FAIL**", "![speedup_vs_gamma.png]"})
    EXPECT_NE(md.find(s), std::string::npos) << "missing '" << s << "' in\n" << md;
  const auto j = metrics_json(info, cells);
  EXPECT_EQ(j["n_cells_finished"], 2);
  EXPECT_EQ(j["checks_passed"], false);
}

TEST(HarnessResults, CompareRuns) {
  const fs::path a = fresh_dir("cmp_a"), b = fresh_dir("cmp_b");
  RunStore(a.string()).commit_cell({}, make_cell("spec", "2", 1.2));
  RunStore(b.string()).commit_cell({}, make_cell("spec", "2", 1.4));
  RunStore(b.string()).commit_cell({}, make_cell("spec", "4", 1.6));
  const std::string t = compare_runs(a.string(), b.string());
  EXPECT_NE(t.find("spec|gamma=2,temperature=0"), std::string::npos) << t;
  EXPECT_NE(t.find("1.200"), std::string::npos) << t;
  EXPECT_NE(t.find("1.400"), std::string::npos) << t;
  EXPECT_NE(t.find("1.000\n"), std::string::npos) << t;  // same tok/s -> ratio 1
  EXPECT_NE(t.find("spec|gamma=4,temperature=0"), std::string::npos) << t;
  EXPECT_THROW(compare_runs(a.string(), (a / "nope").string()), Error);
  fs::remove_all(a);
  fs::remove_all(b);
}
