// The equality matrix through the CLI on a tiny model, in seconds: the fast tier's twin of
// tests/integration/test_cli_equality_matrix_smollm2.cpp (heavy, ~3 minutes on SmolLM2-135M).
// The same logic: build/specdec generate at temperature 0 with every registered drafter, each of
// the four processor sets (none; repetition penalty; penalty + top-k; min-p) and both verify
// modes prints exactly the tokens of greedy decoding with the same processors; stats.verify_modes
// is {greedy} whenever something was drafted; and most runs reject some drafts (rollback runs).
// The target is a tiny Llama GGUF with a byte-level tokenizer (tests/support/tiny_gguf.h) written
// to a temp folder; the draft model is the same file requantised to Q4_1 (--draft-dtype q4_1, a
// lossy copy); eagle and medusa get untrained heads (made as tests/support/fresh_heads.h does).
// To stay in seconds, each (drafter, processor set) pair runs once, on one of three prompts in
// one verify mode, rotated so that every drafter meets every set, every prompt and both modes
// (2 x tokenwise, 2 x block), and every set meets both modes: 40 speculative runs and 12 greedy
// ones, where the SmolLM2 file runs every prompt (132 processes). Measured 2026-12-01: ~19 s on
// 2 cores; all 40 runs rejected some drafts; with the penalty applied to a tree's rows as if
// they were a chain (the bug the SmolLM2 file's first prompt once caught) the tree drafter's
// repetition-penalty run leaves greedy's text at the 7th token, and with block verification not
// reduced to greedy at T = 0 the first block run fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/draft_heads.h"
#include "strategies/drafters.h"
#include "tests/support/command.h"
#include "tests/support/tiny_gguf.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;

namespace {

namespace fs = std::filesystem;
using specdec::testing_support::Output;
using specdec::testing_support::quote;
using specdec::testing_support::shell;

const std::string kBin = binary_dir() + "/specdec";

// This process's folder (a run from another build folder may be running beside it), removed
// when the test program ends.
const fs::path& root() {
  static const specdec::testing_support::ProcessDir dir("specdec_cli_matrix_tiny");
  return dir.path;
}

// The tiny GGUF, written once per test program. Four layers, where the default is two: the
// layer_skip drafter skips round(0.4 L) of the L - 2 middle layers, none of two.
const std::string& tiny_model() {
  static const std::string path = [] {
    specdec::testing::TinyGgufOptions o;
    o.n_layers = 4;
    return specdec::testing::write_tiny_gguf((root() / "tiny.gguf").string(), o);
  }();
  return path;
}

// The same file loaded here: the target the fresh heads are made for.
const specdec::model::LoadedModel& tiny_loaded() {
  static const specdec::model::LoadedModel m = [] {
    specdec::model::ModelSpec spec;
    spec.name = "tiny.gguf";
    spec.path = tiny_model();
    spec.threads = 1;
    return specdec::model::load(spec);
  }();
  return m;
}

// An untrained head of this kind for the tiny target, as tests/support/fresh_heads.h makes them
// (there in a folder shared by every test program: here in this process's own).
std::string fresh_head(const std::string& kind) {
  static std::map<std::string, std::string> written;
  std::string& dir = written[kind];
  if (dir.empty()) {
    dir = (root() / ("fresh_" + kind)).string();
    specdec::model::DraftHead::fresh(*tiny_loaded().model, kind, "test target", 1).save(dir);
  }
  return dir;
}

const std::vector<std::string> kPrompts = {
    "Write a short list of fruits: apple, banana, apple, banana,",
    "def is_prime(n):\n    \"\"\"Return True when n is a prime number.\"\"\"\n",
    "Repeat exactly: \"a b c == a b c == a b c == 1111111111\"",
};

const std::vector<std::pair<std::string, std::vector<std::string>>> kProcessorSets = {
    {"none", {}},
    {"repetition penalty", {"--set", "repetition_penalty=1.5"}},
    {"penalty + top-k", {"--set", "repetition_penalty=1.3", "--set", "top_k=5"}},
    {"min-p", {"--set", "min_p=0.1"}},
};

// `specdec generate ... --json`: the JSON object of the last output line.
nlohmann::json generate(const std::string& prompt, const std::vector<std::string>& extra) {
  std::string cmd = quote(kBin);
  for (const std::string& a : {std::string("generate"), std::string("--model"), tiny_model(), std::string("--prompt"),
                               prompt, std::string("--max-new-tokens"), std::string("32"), std::string("--json"),
                               std::string("--threads"), std::string("1"), std::string("--set"),
                               std::string("temperature=0")})
    cmd += " " + quote(a);
  for (const auto& a : extra) cmd += " " + quote(a);
  const Output o = shell(cmd);
  EXPECT_EQ(o.code, 0) << cmd << "\n" << o.text;
  const auto brace = o.text.rfind("\n{");
  return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1), nullptr, false);
}

TEST(CliEqualityMatrixTiny, EveryDrafterAndProcessorSetEqualsGreedyInBothVerifyModes) {
  const auto& drafters = specdec::strategies::all_drafters();
  std::map<std::pair<size_t, size_t>, nlohmann::json> greedy;  // (prompt, set) -> greedy's output
  std::map<std::string, std::set<std::string>> modes_of_drafter, modes_of_set;
  std::map<std::string, std::set<size_t>> prompts_of_drafter;
  int64_t runs = 0, rejected = 0;
  for (size_t di = 0; di < drafters.size(); ++di)
    for (size_t si = 0; si < kProcessorSets.size(); ++si) {
      const auto& d = drafters[di];
      const auto& [set_name, set] = kProcessorSets[si];
      const size_t pi = (di + si) % kPrompts.size();
      const std::string& prompt = kPrompts[pi];
      const char* verify = (di + si) % 2 ? "block" : "tokenwise";
      nlohmann::json& g = greedy[std::make_pair(pi, si)];
      if (g.is_null()) {
        g = generate(prompt, set);
        ASSERT_TRUE(g.contains("tokens")) << g.dump();
      }
      std::vector<std::string> args = set;
      args.insert(args.end(), {"--strategy", "speculative", "--set", "drafter=" + d.name, "--set",
                               std::string("verify=") + verify, "--set", "repeat_min_run=1"});
      if (d.needs_draft_model) args.insert(args.end(), {"--draft", tiny_model(), "--draft-dtype", "q4_1"});
      if (d.name == "tree") args.insert(args.end(), {"--set", "tree_branching=3,2,1"});
      if (!d.head_param.empty())  // an untrained head: many rejections
        args.insert(args.end(), {"--set", d.head_param + "=" + fresh_head(d.head_kind)});
      const nlohmann::json spec = generate(prompt, args);
      const std::string what = set_name + ", drafter " + d.name + ", verify " + verify + ", prompt " + prompt;
      ASSERT_TRUE(spec.contains("tokens")) << what << ": " << spec.dump();
      EXPECT_EQ(spec["tokens"], g["tokens"]) << what;
      const auto& st = spec["stats"];
      EXPECT_EQ(st["verify_modes"].size(), st["n_drafted"].get<int64_t>() > 0 ? 1u : 0u) << what << ": " << st.dump();
      if (st["n_drafted"].get<int64_t>() > 0) EXPECT_TRUE(st["verify_modes"].contains("greedy")) << what;
      rejected += st["n_accepted"].get<int64_t>() < st["n_drafted"].get<int64_t>();
      std::printf("%-10s %-18s %-9s prompt %zu: drafted %3lld accepted %3lld\n", d.name.c_str(), set_name.c_str(),
                  verify, pi, static_cast<long long>(st["n_drafted"].get<int64_t>()),
                  static_cast<long long>(st["n_accepted"].get<int64_t>()));
      modes_of_drafter[d.name].insert(verify);
      modes_of_set[set_name].insert(verify);
      prompts_of_drafter[d.name].insert(pi);
      ++runs;
    }
  EXPECT_EQ(runs, static_cast<int64_t>(kProcessorSets.size() * drafters.size()));
  EXPECT_GT(rejected, runs / 2) << "most runs should reject some drafts (rollback tested)";
  std::printf("%lld of %lld runs rejected some drafts\n", static_cast<long long>(rejected),
              static_cast<long long>(runs));
  // The rotation covers what the SmolLM2 file's full product does.
  for (const auto& d : drafters) {
    EXPECT_EQ(modes_of_drafter[d.name].size(), 2u) << d.name;
    EXPECT_EQ(prompts_of_drafter[d.name].size(), std::min(kPrompts.size(), kProcessorSets.size())) << d.name;
  }
  for (const auto& [set_name, set] : kProcessorSets) EXPECT_EQ(modes_of_set[set_name].size(), 2u) << set_name;
}

}  // namespace
