// The trace recorder (strategies/trace.h) and page (harness/trace.h) on real SmolLM2 runs:
//  - speculative sampling with a model draft (SmolLM2 without 5 layers), a token tree, the
//    n-gram drafter (no q), greedy and sampling: the rounds agree with the strategy's own
//    statistics and output (rounds = n_rounds, emitted tokens = generated tokens, accepted
//    counts), and every recorded probability is one (top-k sums <= 1, min(1, p/q) in [0, 1]
//    and equal to p/q of the drafted token, residuals only where a token was resampled);
//  - beam search refuses a trace by name;
//  - the page embeds the JSON so that no token text can end its <script> block.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/experiment.h"
#include "harness/runner.h"
#include "harness/trace.h"
#include "model/causal_lm.h"
#include "model/layer_subset.h"
#include "strategies/registry.h"
#include "strategies/trace.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/smollm2.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::strategies;
using nlohmann::json;

namespace test_harness_trace_smollm2 {  // this file's own names (its tests compile in a batch with others)

const std::string& kModel = specdec::testing_support::kSmolLM2;
using specdec::testing_support::smollm2;

// SmolLM2 without 5 of its 30 layers: a draft that disagrees with the target now and then.
std::shared_ptr<model::CausalLM> layer_subset_draft() {
  static const auto draft = [] {
    std::vector<int64_t> keep;
    for (int64_t l = 0; l < 30; ++l)
      if (l < 10 || l > 22 || (l - 10) % 3 != 0) keep.push_back(l);
    return model::make_layer_subset(smollm2().model, keep);
  }();
  return draft;
}

struct Traced {
  Result result;
  json trace;
};

class Trace : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  }
  static Traced run(const std::string& strategy, const Params& params, bool with_draft, int64_t max_new = 40) {
    const auto& m = smollm2();
    Request req;
    req.target = m.model;
    req.tokenizer = m.tokenizer;
    if (with_draft) req.draft = layer_subset_draft();
    req.prompt = m.tokenizer->encode(
        m.tokenizer->apply_chat_template({{"user", "Write two sentences about a lighthouse keeper."}}, true), true);
    req.stop.eos_ids = m.tokenizer->eos_ids();
    req.stop.max_new_tokens = max_new;
    req.seed = 11;
    req.trace = std::make_shared<TraceRecorder>(m.tokenizer, resolve(strategy, params));
    Traced t;
    t.result = create(strategy, params)->generate(req, {});
    t.trace = req.trace->to_json();
    return t;
  }
};

// A top-k list: probabilities in (0, 1], best first, summing to at most 1.
void expect_distribution(const json& top, const std::string& what) {
  ASSERT_TRUE(top.is_array()) << what;
  ASSERT_FALSE(top.empty()) << what;
  double sum = 0, prev = 2;
  for (const auto& e : top) {
    const double v = e[1].get<double>();
    EXPECT_GT(v, 0) << what;
    EXPECT_LE(v, prev) << what << ": not sorted";
    EXPECT_TRUE(e[2].is_string()) << what;
    prev = v;
    sum += v;
  }
  EXPECT_LE(sum, 1 + 1e-5) << what;
}

// The checks every trace must pass against the strategy's own result.
void expect_consistent(const Traced& t, const std::string& name) {
  const auto& st = t.result.stats;
  const json& rounds = t.trace["rounds"];
  Tokens emitted;
  int64_t accepted = 0, drafted = 0, resampled = 0;
  for (const auto& r : rounds) {
    const int64_t n_nodes = static_cast<int64_t>(r["nodes"].size());
    drafted += n_nodes;
    accepted += static_cast<int64_t>(r["path"].size());
    ASSERT_EQ(r["p_top"].size(), static_cast<size_t>(n_nodes + 1)) << name;
    EXPECT_FALSE(r["emitted"].empty()) << name << ": every round commits a token";
    for (size_t j = 0; j < r["emitted"].size(); ++j) {
      const json& e = r["emitted"][j];
      emitted.push_back(e["token"].get<TokenId>());
      EXPECT_TRUE(e["piece"].is_string()) << name;
      if (j < r["path"].size()) {  // an accepted draft: the node the path names, with its token
        EXPECT_EQ(e["kind"], "accepted") << name;
        const json& node = r["nodes"][r["path"][j].get<size_t>()];
        EXPECT_EQ(node["token"], e["token"]) << name;
        EXPECT_EQ(node["status"], "accepted") << name;
      } else {
        EXPECT_NE(e["kind"], "accepted") << name;
        expect_distribution(r["p_top"][e["row"].get<size_t>()], name + ": p of the final row");
      }
      if (e.contains("residual_top")) {
        EXPECT_EQ(e["kind"], "corrected") << name << ": a residual only where a token was resampled";
        expect_distribution(e["residual_top"], name + ": residual");
        ++resampled;
      }
    }
    for (const auto& node : r["nodes"]) {
      const double p = node["p"].get<double>();
      EXPECT_GE(p, 0) << name;
      EXPECT_LE(p, 1) << name;
      if (node["status"] != "skipped") expect_distribution(r["p_top"][node["row"].get<size_t>()], name + ": p");
      if (!r["has_q"].get<bool>()) {
        EXPECT_FALSE(node.contains("accept_prob")) << name;
        continue;
      }
      const double q = node["q"].get<double>(), a = node["accept_prob"].get<double>();
      EXPECT_GE(a, 0) << name;
      EXPECT_LE(a, 1) << name;
      if (q > 0) EXPECT_NEAR(a, std::min(1.0, p / q), 1e-9) << name;
      // The drafted token was drawn from q, so it has mass there.
      EXPECT_GT(q, 0) << name << ": drafted token " << node["token"] << " has q = 0";
      expect_distribution(node["q_top"], name + ": q");
    }
    for (const char* phase : {"draft", "verify", "sample", "accept", "rollback", "other"})
      EXPECT_GE(r["phases_ms"][phase].get<double>(), 0) << name << " " << phase;
  }
  EXPECT_EQ(emitted, t.result.tokens) << name << ": the rounds' tokens are not the generated tokens";
  if (st.n_rounds > 0) {
    EXPECT_EQ(static_cast<int64_t>(rounds.size()), st.n_rounds) << name;
    EXPECT_EQ(accepted, st.n_accepted) << name;
    EXPECT_EQ(drafted, st.n_drafted) << name;
  } else {  // autoregressive: one round per generated token
    EXPECT_EQ(static_cast<int64_t>(rounds.size()), st.n_generated) << name;
  }
  EXPECT_GT(t.trace["prefill_ms"].get<double>(), 0) << name;
  std::printf("  %-40s %zu rounds, %lld tokens, %lld resampled\n", name.c_str(), rounds.size(),
              (long long)t.result.tokens.size(), (long long)resampled);
}

TEST_F(Trace, SpeculativeSamplingWithModelDraft) {
  const Traced t = run("speculative", Params({{"drafter", "model"}, {"temperature", "0.8"}}), true);
  expect_consistent(t, "model draft, T=0.8");
  // The run both rejected and resampled something, so the residual path was exercised.
  int64_t corrected = 0, with_residual = 0;
  for (const auto& r : t.trace["rounds"])
    for (const auto& e : r["emitted"]) {
      corrected += e["kind"] == "corrected";
      with_residual += e.contains("residual_top");
      EXPECT_FALSE(r["tree"].get<bool>());
    }
  EXPECT_GT(corrected, 0);
  EXPECT_EQ(with_residual, corrected);
  // The residual is norm(max(0, p - q)) of the rejected position: for every token whose p and
  // q are both recorded, max(0, p - q) / residual is the same normaliser Z in (0, 1], and the
  // rejected token itself has no residual mass where p <= q.
  int64_t compared = 0;
  for (const auto& r : t.trace["rounds"]) {
    if (r["emitted"].empty() || !r["emitted"].back().contains("residual_top")) continue;
    const json& e = r["emitted"].back();
    const json* rejected = nullptr;
    for (const auto& n : r["nodes"])
      if (n["status"] == "rejected") rejected = &n;
    ASSERT_NE(rejected, nullptr);
    std::map<TokenId, double> p, q;
    for (const auto& x : r["p_top"][e["row"].get<size_t>()]) p[x[0].get<TokenId>()] = x[1].get<double>();
    for (const auto& x : (*rejected)["q_top"]) q[x[0].get<TokenId>()] = x[1].get<double>();
    double z = -1;
    for (const auto& x : e["residual_top"]) {
      const TokenId v = x[0].get<TokenId>();
      if (v == (*rejected)["token"].get<TokenId>())
        EXPECT_GT((*rejected)["p"].get<double>(), (*rejected)["q"].get<double>()) << "rejected token in the residual";
      if (!p.count(v) || !q.count(v)) continue;
      const double est = std::max(0.0, p[v] - q[v]) / x[1].get<double>();
      if (z < 0) z = est;
      EXPECT_NEAR(est, z, 1e-3 * z) << "residual of token " << v << " is not proportional to max(0, p - q)";
      EXPECT_GT(est, 0);
      EXPECT_LE(est, 1 + 1e-5);
      ++compared;
    }
  }
  EXPECT_GT(compared, 5);
  EXPECT_LT(t.result.stats.n_accepted, t.result.stats.n_drafted);
}

TEST_F(Trace, TreeDrafter) {
  const Traced t = run("speculative",
                       Params({{"drafter", "tree"}, {"tree_branching", "3,2,2,1"}, {"temperature", "0.8"}}), true);
  expect_consistent(t, "tree 3,2,2,1, T=0.8");
  int64_t trees = 0;
  for (const auto& r : t.trace["rounds"]) {
    if (!r["tree"].get<bool>()) continue;
    ++trees;
    for (size_t i = 0; i < r["nodes"].size(); ++i) {
      const int64_t parent = r["nodes"][i]["parent"].get<int64_t>();
      EXPECT_GE(parent, -1);
      EXPECT_LT(parent, static_cast<int64_t>(i));
      EXPECT_EQ(r["nodes"][i]["row"].get<int64_t>(), parent + 1);
    }
  }
  EXPECT_EQ(trees, t.result.stats.n_tree_rounds);
  EXPECT_GT(trees, 0);
}

TEST_F(Trace, GreedyTreeAndNgramWithoutDistribution) {
  const Traced tree = run("speculative", Params({{"drafter", "tree"}, {"tree_budget", "12"}, {"temperature", "0"}}), true);
  expect_consistent(tree, "tree budget 12, greedy");
  const Traced ngram = run("speculative", Params({{"drafter", "ngram"}, {"temperature", "0"}}), false);
  expect_consistent(ngram, "ngram, greedy");
  for (const auto& r : ngram.trace["rounds"]) EXPECT_FALSE(r["has_q"].get<bool>());
}

TEST_F(Trace, AutoregressiveStrategiesRecordEachStep) {
  const Traced g = run("greedy", {}, false, 24);
  expect_consistent(g, "greedy");
  const Traced s = run("sampling", Params(std::map<std::string, std::string>{{"temperature", "0.9"}}), false, 24);
  expect_consistent(s, "sampling T=0.9");
  // Greedy picks the argmax of p: the first entry of each step's top-k.
  for (const auto& r : g.trace["rounds"]) {
    EXPECT_EQ(r["kind"], "step");
    EXPECT_EQ(r["emitted"][0]["token"], r["p_top"][0][0][0]);
  }
}

TEST_F(Trace, BeamSearchRefusesATrace) {
  try {
    run("beam", Params(std::map<std::string, std::string>{{"num_beams", "2"}}), false, 8);
    FAIL() << "beam search accepted a trace";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beam"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("trace"), std::string::npos) << e.what();
  }
}

// No weights needed: markup in the data stays data.
TEST(TracePage, EmbeddedJsonCannotEndItsScriptBlock) {
  const json trace = {{"prompt", "</script><script>alert(1)</script><!-- x"}, {"rounds", json::array()},
                      {"piece", std::string("\xe2\x82", 2)}};  // a token cut inside a UTF-8 character
  const std::string page = harness::trace_html(trace);
  const size_t open = page.find("<script type=\"application/json\" id=\"trace-data\">");
  ASSERT_NE(open, std::string::npos);
  const size_t start = page.find('>', open) + 1, end = page.find("</script>", start);
  ASSERT_NE(end, std::string::npos);
  const std::string block = page.substr(start, end - start);
  EXPECT_EQ(block.find('<'), std::string::npos) << block;
  const json back = json::parse(block);
  EXPECT_EQ(back["prompt"], trace["prompt"]);
  EXPECT_EQ(back["piece"], "\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(page.find("@TRACE_JSON@"), std::string::npos);
  const std::string tmp = std::filesystem::temp_directory_path().string();
  EXPECT_EQ(harness::trace_json_path(tmp + "/t.html"), tmp + "/t.json");
  EXPECT_EQ(harness::trace_json_path("t"), "t.json");
  EXPECT_THROW(harness::trace_json_path("t.json"), Error);
  EXPECT_THROW(harness::trace_json_path(tmp + "/no_such_folder/t.html"), Error);
}

// strategies[i].trace in an experiment: traces/<cell>.html and .json in the run folder, a
// generation of the first prompt with the seed of the first measured repeat, so at T > 0 its
// tokens equal that measured sample's; only the traced entry's cells get one.
TEST(TraceExperiment, TracedCellWritesItsPageAndData) {
  namespace fs = std::filesystem;
  using namespace specdec::harness;
  const std::string yaml = R"(
name: trace_cell
models: {target: smollm2-135m, draft: smollm2-135m, threads: 2}
prompts:
  - {text: "The capital of France is", category: prose}
strategies:
  - {name: speculative, label: pld, params: {drafter: ngram, gamma: 3}, trace: true}
  - {name: sampling, label: plain}
sweep: {temperature: [0.8]}
repeats: 2
warmup: 0
seed: 3
max_new_tokens: 12
plots: false
checks: {greedy_equality: false, first_token: false, sequence: false}
)";
  const ExperimentConfig cfg = parse_experiment(yaml, source_dir() + "/experiments/trace_cell.yaml");
  ASSERT_TRUE(cfg.strategies[0].trace);
  ASSERT_FALSE(cfg.strategies[1].trace);
  EXPECT_NE(to_yaml(cfg).find("trace: true"), std::string::npos);
  const fs::path out = fs::temp_directory_path() / "specdec_trace_cell";
  fs::remove_all(out);
  RunOptions opt;
  opt.out_dir = out.string();
  opt.progress = false;
  const RunOutcome r = run_experiment(cfg, opt);
  ASSERT_EQ(r.n_finished, 2);
  std::vector<fs::path> pages, datas;
  for (const auto& e : fs::directory_iterator(out / "traces"))
    (e.path().extension() == ".html" ? pages : datas).push_back(e.path());
  ASSERT_EQ(pages.size(), 1u);
  ASSERT_EQ(datas.size(), 1u);
  std::ifstream jf(datas[0]);
  const json trace = json::parse(jf);
  const std::string cell = trace.at("cell").get<std::string>();
  EXPECT_EQ(cell.rfind("pld|", 0), 0u) << cell;
  EXPECT_EQ(trace.at("rounds").size(), trace.at("stats").at("n_rounds").get<size_t>());
  // The measured candidate sample of repeat 0 on the prompt: the same seed, the same tokens.
  std::ifstream sf(out / "samples.jsonl");
  bool found = false;
  for (std::string line; std::getline(sf, line);) {
    const json s = json::parse(line);
    if (s.at("cell") != cell || s.at("role") != "candidate" || s.at("repeat") != 0) continue;
    EXPECT_EQ(s.at("tokens"), trace.at("tokens"));
    EXPECT_EQ(s.at("seed"), trace.at("seed"));
    found = true;
  }
  EXPECT_TRUE(found) << "no candidate sample of repeat 0 for " << cell;
  std::ifstream hf(pages[0]);
  const std::string page((std::istreambuf_iterator<char>(hf)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("application/json"), std::string::npos);
  // A value that is not a boolean is refused, naming the key.
  try {
    parse_experiment(yaml.substr(0, yaml.find("trace: true")) + "trace: maybe}\n  - {name: sampling}\nsweep: {}\n",
                     "bad.yaml");
    ADD_FAILURE() << "trace: maybe was accepted";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("strategies[0].trace"), std::string::npos) << e.what();
  }
  fs::remove_all(out);
}

}  // namespace test_harness_trace_smollm2
