// End-to-end, in process, on tiny random models (CI): experiments/tiny_ci.yaml, reduced by
// overrides, runs every strategy, writes every result file, and its checks pass; with the
// planted residual bug the same checks fail.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/experiment.h"
#include "harness/runner.h"
#include "model/panels.h"
#include "tests/support/paths.h"
#include "tests/support/tiny_gguf.h"

using specdec::testing_support::source_dir;

using namespace specdec::harness;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kSmall = {"repeats=1", "warmup=0", "sweep.gamma=[3]",
                                         "checks.first_token.samples=800", "checks.sequence.samples=300"};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunOutcome run_tiny(const std::string& out, std::vector<std::string> extra = {}) {
  auto sets = kSmall;
  sets.insert(sets.end(), extra.begin(), extra.end());
  fs::remove_all(out);
  const auto cfg = load_experiment(source_dir() + "/experiments/tiny_ci.yaml", sets);
  RunOptions opt;
  opt.out_dir = out;
  opt.progress = false;
  return run_experiment(cfg, opt);
}

// A fresh folder under the temp directory, and a chat-templated tiny GGUF with a byte tokenizer
// in it (<|im_end|>, id 257, is the end id a grammar ends with).
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}
specdec::testing::TinyGgufOptions chat_tiny() {
  specdec::testing::TinyGgufOptions o;
  o.chat = true;
  return o;
}

// An experiment given as YAML text (as if read from dir/exp.yaml), run into a fresh dir/run.
RunOutcome run_yaml(const std::string& yaml, const fs::path& dir, std::string& out_dir) {
  RunOptions opt;
  opt.out_dir = out_dir = (dir / "run").string();
  opt.progress = false;
  fs::remove_all(opt.out_dir);
  return run_experiment(parse_experiment(yaml, (dir / "exp.yaml").string()), opt);
}

}  // namespace

TEST(HarnessE2E, TinyExperimentRunsAndPassesChecks) {
  const std::string out = (fs::temp_directory_path() / "specdec_e2e_ok").string();
  const auto r = run_tiny(out, {"plots=false"});
  // greedy, sampling, beam + speculative x (gamma 3) x (temperature 0, 1.0)
  EXPECT_EQ(r.n_cells, 5);
  EXPECT_EQ(r.n_finished, 5);
  EXPECT_FALSE(r.interrupted);
  EXPECT_TRUE(r.checks_passed);
  for (const char* f : {"config.yaml", "env.json", "samples.jsonl", "cells.jsonl", "metrics.json", "summary.csv",
                        "report.md"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
  ASSERT_EQ(metrics["cells"].size(), 5u);
  std::set<std::string> checks_seen;
  for (const auto& c : metrics["cells"]) {
    EXPECT_GT(c["tok_s"]["median"].get<double>(), 0) << c["key"];
    EXPECT_EQ(c["n_generated"].get<int64_t>(), 2 * 12) << c["key"];  // 2 prompts x 12 tokens, no EOS
    for (const auto& k : c["checks"]) {
      checks_seen.insert(k["name"].get<std::string>());
      EXPECT_TRUE(k["pass"].get<bool>()) << c["key"] << ": " << k["detail"];
    }
    if (c["strategy"] == "speculative") {
      EXPECT_GT(c["n_drafted"].get<int64_t>(), 0);
      EXPECT_EQ(c["gamma"].get<int64_t>(), 3);
      EXPECT_EQ(c["acceptance_per_position"].size(), 3u);
      EXPECT_GT(c["target_step_ms"].get<double>(), 0);
      // The controller's decisions (adaptive_gamma=off: every round chooses gamma, none steps aside).
      ASSERT_EQ(c["gamma_rounds"].size(), 9u);  // 0..gamma_max
      EXPECT_EQ(c["gamma_rounds"][3], c["n_rounds"]);
      EXPECT_EQ(c["stepped_aside"]["rounds"].get<double>(), 0.0);
    }
  }
  const std::string report = slurp(fs::path(out) / "report.md");
  EXPECT_NE(report.find("| tau | stepped aside | c |"), std::string::npos);
  EXPECT_NE(report.find("| 0.0% (0.0%) |"), std::string::npos);
  EXPECT_EQ(checks_seen, (std::set<std::string>{"greedy_equality", "first_token", "sequence"}));
  // one samples line per generation: 5 cells' measurements + the sampled cell's check runs
  std::ifstream in(fs::path(out) / "samples.jsonl");
  int64_t n_lines = 0, n_check = 0;
  for (std::string line; std::getline(in, line); ++n_lines)
    if (line.find("\"role\":\"check_") != std::string::npos) ++n_check;
  EXPECT_EQ(n_check, 800 + 300);
  EXPECT_EQ(n_lines - n_check, 2 + 2 + 4 + 4 + 4);  // self-baselined cells run once per prompt
  const std::string env = slurp(fs::path(out) / "env.json");
  for (const char* k : {"cpu_model", "cores", "threads", "libtorch_version", "blas", "git_revision", "start_time",
                        "end_time"})
    EXPECT_NE(env.find(k), std::string::npos) << k;
  // What each model holds and streams, and this process's memory (issue 13, item 3).
  const auto env_json = nlohmann::json::parse(env);
  for (const char* role : {"target", "draft"}) {
    const auto& m = env_json.at("models").at(role);
    EXPECT_GT(m.at("resident_weight_bytes").get<int64_t>(), 0) << role;
    EXPECT_GT(m.at("streamed_weight_bytes_per_token").get<int64_t>(), 0) << role;
  }
  for (const char* when : {"after_load", "at_end"}) {
    const auto& mem = env_json.at("memory").at(when);
    EXPECT_GT(mem.at("rss_bytes").get<int64_t>(), 0) << when;
    EXPECT_GE(mem.at("peak_rss_bytes").get<int64_t>(), mem.at("rss_bytes").get<int64_t>()) << when;
  }
  // The CPU kernels the figures ran on, in env.json and on the report's machine line.
  EXPECT_EQ(env_json.at("kernels").at("int8").get<std::string>(), model::panels_int8_kernel());
  EXPECT_NE(report.find(std::string("; kernels ") + model::panels_kernel() + " / int8 " + model::panels_int8_kernel()),
            std::string::npos);
  fs::remove_all(out);
}

TEST(HarnessE2E, PlantedResidualBugMakesChecksFail) {
  const std::string out = (fs::temp_directory_path() / "specdec_e2e_bug").string();
  // The planted bug resamples rejections from p instead of the residual: a subtler error
  // than a wrong target, so the two-sample sequence test gets more samples than kSmall's.
  const auto r = run_tiny(out, {"plots=false", "checks.inject_residual_bug=true", "checks.sequence.samples=2000",
                                "strategies=[{name: speculative, params: {drafter: model}}]"});
  EXPECT_FALSE(r.checks_passed);
  const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
  std::set<std::string> failed;
  for (const auto& c : metrics["cells"])
    for (const auto& k : c["checks"])
      if (!k["pass"].get<bool>()) failed.insert(k["name"].get<std::string>());
  EXPECT_EQ(failed, (std::set<std::string>{"greedy_equality", "first_token", "sequence"}));
  fs::remove_all(out);
}

TEST(HarnessE2E, PlantedBugNeedsAStrategyThatVerifiesDrafts) {
  const std::string out = (fs::temp_directory_path() / "specdec_e2e_bug_sampling").string();
  try {
    run_tiny(out, {"plots=false", "checks.inject_residual_bug=true", "sweep={}", "checks.strategies=[sampling]",
                   "strategies=[{name: sampling, params: {temperature: 0.8}}]"});
    FAIL() << "expected an error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("verifies no drafts"), std::string::npos) << e.what();
  }
  fs::remove_all(out);
}

namespace {

std::vector<nlohmann::json> sample_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::ifstream in(fs::path(out) / "samples.jsonl");
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

}  // namespace

// checks.batch_size only changes how the check samples are computed: batched (8 at a time, from
// the shared prompt prefill) they are the same samples, token for token, as one at a time, so
// the checks' statistics are the same too.
TEST(HarnessE2E, BatchedChecksDrawTheSameSamplesAsOneAtATime) {
  std::map<int64_t, std::vector<nlohmann::json>> checks, lines;
  for (int64_t b : {1, 8}) {
    const std::string out = (fs::temp_directory_path() / ("specdec_e2e_checks_b" + std::to_string(b))).string();
    const auto r = run_tiny(out, {"plots=false", "sweep.temperature=[1.0]", "checks.first_token.samples=120",
                                  "checks.sequence.samples=60", "checks.batch_size=" + std::to_string(b),
                                  "strategies=[{name: speculative, params: {drafter: model}}]"});
    EXPECT_TRUE(r.checks_passed);
    const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
    ASSERT_EQ(metrics["cells"].size(), 1u);
    for (const auto& k : metrics["cells"][0]["checks"]) checks[b].push_back(k);
    for (const auto& l : sample_lines(out))
      if (l["role"].get<std::string>().rfind("check_", 0) == 0) lines[b].push_back(l);
    fs::remove_all(out);
  }
  ASSERT_EQ(lines[1].size(), 120u + 60u);
  ASSERT_EQ(lines[8].size(), lines[1].size());
  for (size_t i = 0; i < lines[1].size(); ++i) {
    EXPECT_EQ(lines[8][i]["role"], lines[1][i]["role"]) << i;
    EXPECT_EQ(lines[8][i]["seed"], lines[1][i]["seed"]) << i;
    EXPECT_EQ(lines[8][i]["tokens"], lines[1][i]["tokens"]) << i;
  }
  ASSERT_EQ(checks[1].size(), 2u);
  ASSERT_EQ(checks[8].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(checks[8][i]["name"], checks[1][i]["name"]);
    EXPECT_EQ(checks[8][i]["p_value"], checks[1][i]["p_value"]);
  }
}

// sweep: {batch_size: [1, 2]}: every measured sequence's tokens are the same at batch size 1 and
// 2 (greedy, sampling at T = 1, speculative decoding at T = 0 and 1), and a batched repeat's
// throughput is its tokens over the batch's wall time, not over its sequences' summed times.
TEST(HarnessE2E, BatchSizeSweepKeepsEveryTokenAndTimesTheBatch) {
  const std::string out = (fs::temp_directory_path() / "specdec_e2e_batch").string();
  const auto r = run_tiny(out, {"plots=false", "sweep={batch_size: [1, 2], temperature: [0, 1.0]}",
                                "checks.first_token=false", "checks.sequence=false",
                                "strategies=[{name: greedy, params: {temperature: 0}}, {name: sampling, params: {temperature: 1.0}}, "
                                "{name: speculative, params: {drafter: model, gamma: 3}}]"});
  EXPECT_TRUE(r.checks_passed);
  EXPECT_EQ(r.n_finished, 2 + 2 + 2 * 2);  // greedy and sampling pin their temperature
  std::map<std::string, nlohmann::json> by_key;  // cell without batch_size | role | prompt -> tokens
  int64_t n_batched = 0;
  for (const auto& l : sample_lines(out)) {
    std::string cell = l["cell"].get<std::string>();
    const bool batched = cell.find("batch_size=2") != std::string::npos;
    for (const char* b : {"batch_size=1", "batch_size=2"})
      if (const auto at = cell.find(b); at != std::string::npos) cell.erase(at, std::string(b).size());
    const std::string key = cell + "|" + l["role"].get<std::string>() + "|" + l["prompt"].get<std::string>();
    if (!batched) {
      EXPECT_FALSE(l.contains("batch_wall_ms"));
      by_key[key] = l["tokens"];
      continue;
    }
    ++n_batched;
    EXPECT_EQ(l["batch_size"].get<int64_t>(), 2);
    EXPECT_GE(l["batch_wall_ms"].get<double>(), l["wall_ms"].get<double>());
    ASSERT_TRUE(by_key.count(key)) << key;  // batch_size 1's cell ran first (sweep order)
    EXPECT_EQ(l["tokens"], by_key.at(key)) << key;
  }
  EXPECT_GT(n_batched, 0);
  const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
  for (const auto& c : metrics["cells"]) {
    if (c["key"].get<std::string>().find("batch_size=2") == std::string::npos) continue;
    double tokens = 0, wall = 0;
    for (const auto& l : sample_lines(out))
      if (l["cell"] == c["key"] && l["role"] == "candidate")
        tokens += l["n_generated"].get<double>(), wall = l["batch_wall_ms"].get<double>();
    EXPECT_NEAR(c["tok_s"]["median"].get<double>(), 1000 * tokens / wall, 1e-6 * 1000 * tokens / wall) << c["key"];
  }
  fs::remove_all(out);
}

// The controller's decisions in metrics.json and report.md: a fixed cost table where drafting
// cannot pay steps aside in every round (n-gram drafter, so the table's drafter is known).
TEST(HarnessE2E, SteppedAsideRoundsReachMetricsAndReport) {
  const fs::path dir = fresh_dir("specdec_e2e_aside");
  const std::string costs = (dir / "costs.json").string();
  std::ofstream(costs) << R"({"drafter": "ngram", "verify_ms": {"1": 10, "9": 11}, "draft_ms_per_token": 1000,
                              "acceptance": 1})";
  const std::string yaml = "name: aside\nmodels: {target: {name: tiny-llama, seed: 0}}\n" + std::string(R"(
prompts: [the quick brown fox]
strategies:
  - {name: speculative, params: {temperature: 0, drafter: ngram, adaptive_gamma: cost, controller_costs: ')") +
                           costs + R"('}}
repeats: 1
warmup: 0
max_new_tokens: 8
plots: false
)";
  std::string out;
  const auto r = run_yaml(yaml, dir, out);
  EXPECT_TRUE(r.checks_passed);  // greedy equality
  const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
  ASSERT_EQ(metrics["cells"].size(), 1u);
  const auto& c = metrics["cells"][0];
  EXPECT_GT(c["n_rounds"].get<int64_t>(), 0);
  EXPECT_EQ(c["gamma_rounds"][0], c["n_rounds"]);
  EXPECT_EQ(c["n_aside_tokens"], c["n_generated"]);
  EXPECT_EQ(c["stepped_aside"]["rounds"].get<double>(), 1.0);
  EXPECT_EQ(c["stepped_aside"]["tokens"].get<double>(), 1.0);
  EXPECT_NE(slurp(fs::path(out) / "report.md").find("| 100.0% (100.0%) |"), std::string::npos);
  fs::remove_all(dir);
}

// Several drafters (drafters: "ngram,suffix", one value, not a sweep) under fixed tables of each:
// every round's drafter reaches samples.jsonl, metrics.json (per_drafter, summed) and report.md.
TEST(HarnessE2E, MixedDrafterRoundsReachMetricsAndReport) {
  const fs::path dir = fresh_dir("specdec_e2e_mixed");
  const std::string costs = (dir / "costs.json").string();
  std::ofstream(costs) << R"([{"drafter": "ngram", "verify_ms": {"1": 10, "9": 10.5}, "draft_ms_per_token": 0, "acceptance": 0.9},
    {"drafter": "suffix", "verify_ms": {"1": 10, "9": 10.5}, "draft_ms_per_token": 0, "acceptance": 0.9}])";
  const std::string yaml = "name: mixed\nmodels: {target: {name: tiny-llama, seed: 0}}\n" + std::string(R"(
prompts: [the quick brown fox jumps over the quick brown fox]
strategies:
  - {name: speculative, params: {temperature: 0, drafters: "ngram,suffix", adaptive_gamma: cost, controller_costs: ')") +
                           costs + R"('}}
repeats: 1
warmup: 0
max_new_tokens: 24
plots: false
)";
  std::string out;
  const auto r = run_yaml(yaml, dir, out);
  EXPECT_TRUE(r.checks_passed);  // greedy equality
  const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
  ASSERT_EQ(metrics["cells"].size(), 1u);
  const auto& c = metrics["cells"][0];
  EXPECT_EQ(c["params"]["drafters"], "ngram,suffix");
  const auto& per = c["per_drafter"];
  ASSERT_FALSE(per.empty()) << c.dump();
  int64_t rounds = c["gamma_rounds"][0].get<int64_t>(), drafted = 0;
  for (const auto& [name, n] : per.items()) {
    EXPECT_TRUE(name == "ngram" || name == "suffix") << name;
    rounds += n["rounds"].get<int64_t>();
    drafted += n["drafted"].get<int64_t>();
  }
  EXPECT_EQ(rounds, c["n_rounds"].get<int64_t>());
  EXPECT_EQ(drafted, c["n_drafted"].get<int64_t>());
  EXPECT_NE(slurp(fs::path(out) / "report.md").find("## Drafters chosen"), std::string::npos);
  fs::remove_all(dir);
}

// Structured output through the harness: prompts with their own constraint (one that ends within
// max_new_tokens, one cut off by it) beside one under the strategies' constraint, and
// checks.valid counting the complete outputs, on a tiny GGUF with a byte tokenizer. The third
// cell's draft model (the target itself) drafts outside the grammar (draft_mask off), so the
// grammar refuses some of its tokens: metrics.json and report.md count them per cell.
TEST(HarnessE2E, PromptConstraintsAndValidCount) {
  const fs::path dir = fresh_dir("specdec_e2e_valid");
  const std::string model = specdec::testing::write_tiny_gguf((dir / "tiny.gguf").string(), chat_tiny());
  const std::string yaml =
      "name: valid_check\nmodels: {target: {name: '" + model + "'}, draft: {name: '" + model + "'}}\n" + R"(
prompts:
  - {text: x, regex: ab}
  - {text: y, regex: "c{20}"}
  - z
strategies:
  - {name: greedy, params: {temperature: 0, regex: "[0-9]{3}"}}
  - {name: speculative, params: {temperature: 0, drafter: ngram, gamma: 2, regex: "[0-9]{3}"}}
  - {name: speculative, label: spec-unmasked, params: {temperature: 0, drafter: model, gamma: 2, draft_mask: false, regex: "[0-9]{3}"}}
repeats: 1
warmup: 0
max_new_tokens: 6
plots: false
checks: {valid: true}
)";
  std::string out;
  const auto r = run_yaml(yaml, dir, out);
  EXPECT_EQ(r.n_finished, 3);
  EXPECT_TRUE(r.checks_passed);  // greedy equality of the speculative cells under the same constraints
  std::ifstream in(fs::path(out) / "samples.jsonl");
  int64_t n_lines = 0;
  std::map<std::string, int64_t> forced_of, refused_of;  // cell -> its candidate lines' n_forced, n_refused, summed
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    ++n_lines;
    if (j["role"] == "candidate") {
      forced_of[j["cell"]] += j["stats"].value("n_forced", int64_t{0});
      refused_of[j["cell"]] += j["stats"].value("n_refused", int64_t{0});
    }
    const std::string text = j["text"], prompt = j["prompt"], finish = j["finish"];
    if (prompt == "p0") {
      EXPECT_EQ(text, "ab");
      EXPECT_EQ(finish, "eos");
      EXPECT_TRUE(j["valid"].get<bool>());
    } else if (prompt == "p1") {
      EXPECT_EQ(text, "cccccc");
      EXPECT_EQ(finish, "length");
      EXPECT_FALSE(j["valid"].get<bool>());
    } else {
      EXPECT_EQ(text.size(), 3u) << text;
      EXPECT_EQ(text.find_first_not_of("0123456789"), std::string::npos) << text;
      EXPECT_TRUE(j["valid"].get<bool>());
    }
  }
  EXPECT_EQ(n_lines, 3 + 2 * (3 + 3));  // greedy (its own baseline); each speculative cell and its baseline
  const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
  ASSERT_EQ(metrics["cells"].size(), 3u);
  std::string refused_cell;  // the report's refused column for the unmasked model drafter
  for (const auto& c : metrics["cells"]) {
    EXPECT_EQ(c["valid"]["n_constrained"].get<int64_t>(), 3) << c["key"];
    EXPECT_EQ(c["valid"]["n_valid"].get<int64_t>(), 2) << c["key"];
    // The forced tokens, summed over prompts: the speculative cell drafts them for free (the
    // regexes' letters and digits one admitted token at a time), greedy has none.
    const int64_t forced = c["n_forced"].get<int64_t>(), generated = c["n_generated"].get<int64_t>();
    EXPECT_EQ(forced, forced_of[c["key"]]) << c["key"];
    EXPECT_NEAR(c["forced_share"].get<double>(), double(forced) / double(generated), 1e-12) << c["key"];
    if (c["strategy"] == "speculative") EXPECT_GT(forced, 0) << c["key"];
    else EXPECT_EQ(forced, 0) << c["key"];
    // The refused draft tokens likewise: only the drafter drafting outside the grammar has any.
    const int64_t refused = c["n_refused"].get<int64_t>(), drafted = c["n_drafted"].get<int64_t>();
    EXPECT_EQ(refused, refused_of[c["key"]]) << c["key"];
    const bool unmasked = c["params"].value("draft_mask", "") == "false";
    if (unmasked) {
      EXPECT_GT(refused, 0) << c["key"];
      EXPECT_NEAR(c["refused_share"].get<double>(), double(refused) / double(drafted), 1e-12) << c["key"];
      char share[32];
      std::snprintf(share, sizeof share, "| %.1f%% |", 100.0 * double(refused) / double(drafted));
      refused_cell = share;
    } else {
      EXPECT_EQ(refused, 0) << c["key"];
    }
  }
  const std::string report = slurp(fs::path(out) / "report.md");
  EXPECT_NE(report.find("| stepped aside | forced | refused | c |"), std::string::npos) << report;
  ASSERT_FALSE(refused_cell.empty());
  EXPECT_NE(report.find(refused_cell), std::string::npos) << refused_cell << "\n" << report;
  EXPECT_NE(report.find("## Structured output (checks.valid)"), std::string::npos);
  EXPECT_NE(report.find("| 2 | 3 | 0.667 |"), std::string::npos) << report;
  fs::remove_all(dir);
}

// Sampled speculative decoding under a constraint, through the harness's first-token and
// sequence checks: the first token's reference is the target's row with the grammar's mask
// applied before the processors, and the sequence test's baseline samples under the same
// constraint. Once with the strategy's regex, once with the prompt's own. The draft is another
// random model, unconstrained, so most of its tokens fall outside [a-p] and the target's
// rejections and residual draws carry the mask. With an unmasked reference the candidate's
// first tokens (letters only) would land in bins the unconstrained target gives little mass,
// and the first-token check would fail.
TEST(HarnessE2E, SampledChecksUseTheConstrainedTarget) {
  const fs::path dir = fresh_dir("specdec_e2e_constrained_checks");
  specdec::testing::TinyGgufOptions o = chat_tiny();
  // Flatter logits than the default (output_scale 4, whose top token after "x" holds 0.999 of the
  // letters' mass): the first-token test then has several letters' bins to test.
  o.output_scale = 0.5f;
  const std::string target = specdec::testing::write_tiny_gguf((dir / "target.gguf").string(), o);
  o.seed = 777;
  const std::string draft = specdec::testing::write_tiny_gguf((dir / "draft.gguf").string(), o);
  const std::string regex = "'[a-p]{2,5}'";
  for (const bool on_prompt : {false, true}) {
    SCOPED_TRACE(on_prompt ? "the prompt's constraint" : "the strategy's constraint");
    const std::string yaml =
        "name: constrained_checks\nmodels: {target: {name: '" + target + "'}, draft: {name: '" + draft + "'}}\n" +
        "prompts:\n  - " + (on_prompt ? "{text: x, regex: " + regex + "}" : "x") + "\n" +
        "strategies:\n  - {name: speculative, params: {temperature: 1.0, drafter: model, gamma: 3" +
        (on_prompt ? "" : ", regex: " + regex) + "}}\n" + R"(
repeats: 1
warmup: 0
max_new_tokens: 4
plots: false
checks: {first_token: {samples: 800, top_k: 8}, sequence: {samples: 300, length: 4}, significance: 0.001}
)";
    std::string out;
    const auto r = run_yaml(yaml, dir, out);
    EXPECT_TRUE(r.checks_passed);
    const auto metrics = nlohmann::json::parse(slurp(fs::path(out) / "metrics.json"));
    ASSERT_EQ(metrics["cells"].size(), 1u);
    EXPECT_GT(metrics["cells"][0]["n_drafted"].get<int64_t>(), 0);
    std::set<std::string> names;
    for (const auto& k : metrics["cells"][0]["checks"]) {
      const std::string name = k["name"], detail = k["detail"];
      names.insert(name);
      EXPECT_TRUE(k["pass"].get<bool>()) << name << ": " << detail;
      EXPECT_NE(detail.find("under regex"), std::string::npos) << detail;
      EXPECT_EQ(detail.find("not testable"), std::string::npos) << detail;  // a real test, several bins
    }
    EXPECT_EQ(names, (std::set<std::string>{"first_token", "sequence"}));
    // Every check sample (the candidate's and the baseline's) is in the language's alphabet.
    int64_t n_check = 0;
    for (const auto& l : sample_lines(out)) {
      if (l["role"].get<std::string>().rfind("check_", 0) != 0) continue;
      ++n_check;
      for (const int64_t t : l["tokens"].get<std::vector<int64_t>>())
        EXPECT_TRUE((t >= 'a' && t <= 'p') || t == 257) << l["role"] << " token " << t;
    }
    EXPECT_EQ(n_check, 800 + 300);
  }
  fs::remove_all(dir);
}
