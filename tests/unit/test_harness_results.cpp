// Run folder durability (commit, torn lines, pruning for --resume) and the contents of
// metrics.json, summary.csv, report.md and the compare table.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "harness/report.h"
#include "harness/results.h"

using namespace specdec;
using namespace specdec::harness;
namespace fs = std::filesystem;

namespace test_harness_results {  // this file's own names (its tests compile in a batch with others)

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

LoadSample quiet_load() {
  LoadSample l;
  l.wall_s = 10;
  l.loadavg_start = 0.1;
  l.loadavg_end = 0.3;
  l.loadavg_max = 0.3;
  l.involuntary_switches = 20;
  l.involuntary_switches_per_s = 2;
  l.own_cpu_s = 19.5;
  l.foreign_cpu_s = 0.5;
  l.foreign_cores = 0.05;
  l.steal_fraction = 0;
  l.resolution_cores = 0.004;
  l.n_cpus = 2;
  return l;
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
  m.categories["code"] = {1, 44, 1.5, 45, 30, 1.5, 3.5};
  m.categories["prose"] = {1, 36, 1.2, 35, 29.1667, 1.2, 2.7};
  m.mean_tok_s = 40;
  m.mean_baseline_tok_s = 29.5;
  m.mean_speedup = speedup;
  m.decode_speedup = speedup + 0.25;
  CheckOutcome c;
  c.name = "greedy_equality";
  c.pass = true;
  c.n_samples = 2;
  c.detail = "exact-match rate 100.0% (2/2)";
  m.checks.push_back(c);
  m.phases.n_generations = 6;
  m.phases.n_rounds = 40;
  m.phases.wall_ms = 1000;
  m.phases.ms.setup = 10;
  m.phases.ms.prefill = 90;
  m.phases.ms.draft = 300;
  m.phases.ms.draft_catchup = 100;
  m.phases.ms.verify = 500;
  m.phases.ms.sample = 40;
  m.phases.ms.grammar = 10;  // part of sample
  m.phases.ms.accept = 30;
  m.phases.ms.rollback = 5;
  m.phases.ms.logits_copy = 15;
  m.phases.ms.other = 8;  // 2 ms unattributed
  m.baseline_phases.n_generations = 6;
  m.baseline_phases.wall_ms = 1500;
  m.baseline_phases.ms.verify = 1400;
  m.load = quiet_load();
  return m;
}

TEST(HarnessResults, CellJsonRoundTrip) {
  const auto m = make_cell("spec", "4", 1.7);
  const auto back = cell_from_json(to_json(m));
  EXPECT_EQ(to_json(back), to_json(m));
  EXPECT_THROW(cell_from_json(nlohmann::json{{"key", "x"}}), Error);
  const auto j = to_json(m);
  EXPECT_DOUBLE_EQ(j["phases"]["ms"]["draft_catchup"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(j["phases"]["fraction"]["verify"].get<double>(), 0.5);
  EXPECT_EQ(j["phases"]["n_rounds"], 40);
  EXPECT_DOUBLE_EQ(j["baseline_phases"]["ms"]["verify"].get<double>(), 1400);
  EXPECT_EQ(j["load"]["verdict"], "quiet");
  EXPECT_EQ(j["load"]["contended"], false);
  EXPECT_DOUBLE_EQ(j["load"]["foreign_cores"].get<double>(), 0.05);
}

// Records written before the phase breakdown and the load monitor existed (old runs resumed,
// committed results read by `specdec compare`) still load: not measured / load unknown.
TEST(HarnessResults, OldRecordsWithoutPhasesOrLoadStillLoad) {
  auto j = to_json(make_cell("spec", "4", 1.7));
  for (const char* k : {"phases", "baseline_phases", "load"}) j.erase(k);
  const CellMetrics old = cell_from_json(j);
  EXPECT_EQ(old.phases.n_generations, 0);
  EXPECT_EQ(old.phases.ms.sum(), 0);
  EXPECT_FALSE(old.load.known());
  EXPECT_STREQ(old.load.verdict(), "unknown");
  EXPECT_DOUBLE_EQ(old.speedup.median, 1.7);
  // A record from a build with fewer phases reads the missing ones as 0.
  auto k = to_json(make_cell("spec", "4", 1.7));
  k["phases"]["ms"].erase("logits_copy");
  EXPECT_EQ(cell_from_json(k).phases.ms.logits_copy, 0);
  EXPECT_EQ(cell_from_json(k).phases.ms.verify, 500);
  // Present but malformed is still an error naming the cell.
  k["phases"]["ms"]["verify"] = "slow";
  EXPECT_THROW(cell_from_json(k), Error);
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

// A resumed run's first commit after a kill mid-write: the torn record (no newline at its end,
// whether or not its text parses) is cut before the new one is appended, so the new record does
// not continue its line. Without the cut the kill-and-resume test read a line holding both.
TEST(HarnessResults, ACommitAfterATornLineCutsIt) {
  const fs::path dir = fresh_dir("store_torn");
  RunStore store(dir.string());
  const auto a = make_cell("spec", "2", 1.2), b = make_cell("spec", "4", 1.6), c = make_cell("spec", "8", 1.8);
  store.commit_cell({}, a);
  append_durable(store.path("cells.jsonl"), "{\"key\": \"spec|gam");
  store.commit_cell({{{"cell", b.cell.key}, {"i", 0}}}, b);
  // A whole record whose newline the kill cut off was not committed either.
  append_durable(store.path("cells.jsonl"), to_json(a).dump());
  append_durable(store.path("samples.jsonl"), "{\"cell\": \"x\"}");
  EXPECT_EQ(store.load_records("samples.jsonl").size(), 1u);
  ASSERT_EQ(store.load_finished().size(), 2u);
  store.commit_cell({{{"cell", c.cell.key}, {"i", 0}}}, c);
  const auto done = store.load_finished();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[1].cell.key, b.cell.key);
  EXPECT_EQ(done[2].cell.key, c.cell.key);
  EXPECT_EQ(slurp(store.path("samples.jsonl")),
            "{\"cell\":\"" + b.cell.key + "\",\"i\":0}\n{\"cell\":\"" + c.cell.key + "\",\"i\":0}\n");
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
  const std::string old_columns =
      "\"spec|gamma=2,temperature=0\",spec,speculative,gamma=2 temperature=0,2,3,40.000,38.000,42.000,"
      "0.000,0.000,greedy,0.000,1.2500,1.1500,1.3500,0.8000,3.1000,2,0.1000,2.4000,0.5208,pass,";
  EXPECT_EQ(row1.substr(0, old_columns.size()), old_columns);  // new columns only ever go at the end
  EXPECT_NE(row2.find(",FAIL,"), std::string::npos);
  // Column by name: phases of candidate and baseline, load.
  auto column = [&](const std::string& row, const std::string& name) {
    std::vector<std::string> h, r;
    std::string cell;
    for (std::istringstream hs(header); std::getline(hs, cell, ',');) h.push_back(cell);
    // row1's first field is quoted and holds a comma: rejoin it
    std::istringstream rs(row);
    for (bool quoted = false; std::getline(rs, cell, ',');) {
      if (quoted) r.back() += "," + cell; else r.push_back(cell);
      quoted = std::count(r.back().begin(), r.back().end(), '"') % 2 == 1;
    }
    EXPECT_EQ(h.size(), r.size()) << header << "\n" << row;
    const auto it = std::find(h.begin(), h.end(), name);
    return it == h.end() || size_t(it - h.begin()) >= r.size() ? std::string("<no column ") + name + ">"
                                                                : r[size_t(it - h.begin())];
  };
  EXPECT_EQ(column(row1, "wall_ms"), "1000.000");
  EXPECT_EQ(column(row1, "ms_verify"), "500.000");
  EXPECT_EQ(column(row1, "frac_verify"), "0.5000");
  EXPECT_EQ(column(row1, "ms_draft_catchup"), "100.000");
  EXPECT_EQ(column(row1, "base_ms_verify"), "1400.000");
  EXPECT_EQ(column(row1, "base_frac_verify"), "0.9333");
  EXPECT_EQ(column(row1, "foreign_cores"), "0.050");
  EXPECT_EQ(column(row1, "contended"), "false");
  EXPECT_EQ(column(row1, "load"), "quiet");

  RunInfo info{"exp", "a test", "20260101-000000", "tiny-llama", "",
               nlohmann::json{{"cpu_model", "CPU X"}, {"load", {{"loadavg_start", 0.12}, {"loadavg_end", 0.34}}}}, 3};
  const std::string md = report_markdown(info, cells, {"speedup_vs_gamma.png"});
  for (const char* s : {"# exp — run 20260101-000000", "CPU X", "cells finished: 2 of 3", "**SOME FAIL**",
                        "| spec | gamma=2 temperature=0 | 40.00 |", "1.250 [1.150, 1.350]", "| 0.800 | 3.100 |",
                        "## Acceptance by draft position", "| 0.900 | 0.800 | 0.700 |", "| spec | gamma=2 temperature=0 | 1.50x | 1.20x | 3.10 | 1.25x | 1.50x |",
                        "Questions per category: code 1; prose 1; autoregressive baseline, mean tok/s: code 30.00; "
                        "prose 29.17; overall 29.50.",
                        "prompt p1 differs at position 3", "**FAIL**", "![speedup_vs_gamma.png]",
                        "load average 0.12 at start, 0.34 at end; 0 of 2 cells contended", "| quiet |",
                        "## Where the time goes", "| spec | gamma=2 temperature=0 | 25.00 | 1.0% (0.250) | 9.0% (2.25) | "
                        "30.0% (7.50) | 10.0% (2.50) | 50.0% (12.50) | 4.0% (1.00) | 1.0% (0.250) | 3.0% (0.750) | 0.5% (0.125) | "
                        "1.5% (0.375) | 0.8% (0.200) | 0.2% |"})
    EXPECT_NE(md.find(s), std::string::npos) << "missing '" << s << "' in\n" << md;
  EXPECT_EQ(md.find("contended machine"), std::string::npos) << md;
  const auto j = metrics_json(info, cells);
  EXPECT_EQ(j["n_cells_finished"], 2);
  EXPECT_EQ(j["checks_passed"], false);
  EXPECT_EQ(j["cells"][0]["load"]["verdict"], "quiet");
  EXPECT_DOUBLE_EQ(j["cells"][0]["phases"]["ms"]["verify"].get<double>(), 500);
}

// Spec-Bench's table: its six groups first in its paper's order (whatever the map's order),
// other categories after them; "-" for a cell without a baseline; the context file appended.
TEST(HarnessResults, SpecBenchTableOrderAndContext) {
  CellMetrics a = make_cell("sps", "6", 1.8), ar = make_cell("greedy", "0", 1.0);
  a.categories.clear();
  const std::vector<std::pair<std::string, double>> groups = {{"rag", 2.0}, {"qa", 1.1}, {"zeta", 0.9},
                                                               {"multi_turn", 1.6}, {"summarization", 1.4}};
  for (const auto& [g, sp] : groups) a.categories[g] = {5, 10, sp, 10, 10 / sp, sp, 2.5};
  ar.baseline.clear();
  ar.categories = a.categories;
  RunInfo info{"spec_bench", "", "r", "qwen", "", nlohmann::json::object(), 2};
  info.context_markdown = "| SpS | 1.52x |\n";
  const std::string md = report_markdown(info, {a, ar}, {});
  const std::string header = "| method | params | multi_turn | summarization | qa | rag | zeta | mean accepted tokens "
                             "| overall | decode only |";
  EXPECT_NE(md.find(header), std::string::npos) << md;
  EXPECT_NE(md.find("| sps | gamma=6 temperature=0 | 1.60x | 1.40x | 1.10x | 2.00x | 0.90x | 3.10 | 1.80x | 2.05x |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| greedy | gamma=0 temperature=0 | - | - | - | - | - | 3.10 | - | - |"), std::string::npos) << md;
  const auto ctx = md.find("## Context (not measured in this run)\n\n| SpS | 1.52x |");
  ASSERT_NE(ctx, std::string::npos) << md;
  EXPECT_GT(ctx, md.find(header));  // at the end
  info.context_markdown.clear();
  EXPECT_EQ(report_markdown(info, {a, ar}, {}).find("## Context"), std::string::npos);
  // Single-category runs (no cell with more than one category): no Spec-Bench table at all.
  for (auto* m : {&a, &ar}) m->categories = {{"all", {5, 10, 1.8, 10, 5.56, 1.8, 2.5}}};
  const std::string single = report_markdown(info, {a, ar}, {});
  EXPECT_EQ(single.find("Spec-Bench"), std::string::npos) << single;
  EXPECT_EQ(single.find("mean accepted tokens"), std::string::npos) << single;
  EXPECT_EQ(single.find("Questions per category"), std::string::npos) << single;
}

// A merged run whose shards ran on different machines says so: its averages over prompts pool
// the machines' speeds. Shards of one machine get no such line.
TEST(HarnessResults, ReportWarnsWhenShardsRanOnDifferentMachines) {
  const auto shard = [](const char* dir, const char* cpu, const char* fp32, const char* prompt) {
    return nlohmann::json{{"dir", dir}, {"node", "n"}, {"prompts", {prompt}},
                          {"env", {{"cpu_model", cpu}, {"kernels", {{"fp32", fp32}, {"int8", "vnni"}}}}}};
  };
  const std::vector<CellMetrics> cells = {make_cell("spec", "2", 1.25)};
  RunInfo mixed{"exp", "", "r", "tiny-llama", "", nlohmann::json::object(), 1};
  mixed.env["shards"] = {shard("a", "CPU A", "avx512", "p1"), shard("b", "CPU A", "avx2", "p2"),
                         shard("c", "CPU A", "avx512", "p3")};
  const std::string md = report_markdown(mixed, cells, {});
  for (const char* s : {"**The shards ran on 2 different machines**", "CPU A (fp32 avx2, int8 vnni);",
                        "CPU A (fp32 avx512, int8 vnni);", "weighs every prompt by its machine's speed"})
    EXPECT_NE(md.find(s), std::string::npos) << "missing '" << s << "' in\n" << md;
  RunInfo one = mixed;
  one.env["shards"] = {shard("a", "CPU A", "avx512", "p1"), shard("c", "CPU A", "avx512", "p3")};
  const std::string same = report_markdown(one, cells, {});
  EXPECT_NE(same.find("which node ran what"), std::string::npos) << same;
  EXPECT_EQ(same.find("different machines"), std::string::npos) << same;
}

TEST(HarnessResults, ReportAndCsvFlagContendedCells) {
  std::vector<CellMetrics> cells = {make_cell("spec", "2", 1.25), make_cell("spec", "4", 1.5),
                                    make_cell("spec", "6", 1.6)};
  cells[1].load.foreign_cores = 0.9;
  cells[1].load.foreign_cpu_s = 9;
  cells[2].load = LoadSample{};  // /proc unreadable
  const std::string md = report_markdown({"exp", "", "r", "tiny-llama", "", nlohmann::json::object(), 3}, cells, {});
  for (const char* s : {"⚠ **1 of 3 cells were measured on a contended machine**", "not to be trusted",
                        "| ⚠ contended (other processes used 0.90 cores) |", "| quiet |", "| unknown |",
                        "1 of 3 cells contended (1 unknown)"})
    EXPECT_NE(md.find(s), std::string::npos) << "missing '" << s << "' in\n" << md;
  const std::string csv = summary_csv(cells);
  EXPECT_NE(csv.find(",contended,true,0.900,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",unknown,false,-1.000,"), std::string::npos) << csv;
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
  EXPECT_EQ(t.find('!'), std::string::npos) << t;  // no contended cell, no marker
  EXPECT_THROW(compare_runs(a.string(), (a / "nope").string()), Error);
  CellMetrics busy = make_cell("spec", "8", 1.1);
  busy.load.foreign_cores = 1.2;
  RunStore(b.string()).commit_cell({}, busy);
  const std::string t2 = compare_runs(a.string(), b.string());
  EXPECT_NE(t2.find("40.00!"), std::string::npos) << t2;
  EXPECT_NE(t2.find("! measured on a contended machine"), std::string::npos) << t2;
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace test_harness_results
