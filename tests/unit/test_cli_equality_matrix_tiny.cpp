// The equality matrix through the CLI on a tiny model, in seconds: the fast tier's twin of
// tests/integration/test_cli_equality_matrix_smollm2.cpp (heavy, ~1 minute on SmolLM2-135M);
// one run's checks are written once for both in tests/support/cli_equality_matrix_cases.h.
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
// ones, where the SmolLM2 file runs every prompt (132 runs). The runs go through cli::dispatch in
// this program, the CLI's main() less its process start (tests/support/cli_in_process.h), and
// TheBinaryPrintsWhatTheInProcessRunsRead runs one pair through build/specdec_with_examples too.
// The sanitizer build runs the whole rotation as well (it ran one set a drafter while each run was
// a process start, ~1-2.5 s there). Measured 2026-12-06 on a 2-core Zen 5 EPYC: the rotation
// 0.3 s in the test program (19 s when each run was a process); all 40 runs rejected some drafts;
// with the penalty applied to a tree's rows as if they were a chain (the bug the SmolLM2 file's
// first prompt once caught) the tree drafter's repetition-penalty run leaves greedy's text at the
// 7th token, and with block verification not reduced to greedy at T = 0 the first block run fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "model/causal_lm.h"
#include "model/draft_heads.h"
#include "speculative/proposer.h"
#include "tests/support/cli_equality_matrix_cases.h"
#include "tests/support/command.h"
#include "tests/support/tiny_gguf.h"

namespace {

namespace fs = std::filesystem;
using namespace specdec::testing_support;

// This process's folder (a run from another build folder may be running beside it), removed
// when the test program ends.
const fs::path& root() {
  static const ProcessDir dir("specdec_cli_matrix_tiny");
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

// An untrained head of this drafter's kind for the tiny target, as tests/support/fresh_heads.h
// makes them (there in a folder shared by every test program: here in this process's own).
std::map<std::string, std::string> fresh_head(const specdec::strategies::DrafterInfo& d) {
  if (d.head_param.empty()) return {};
  static std::map<std::string, std::string> written;
  std::string& dir = written[d.head_kind];
  if (dir.empty()) {
    dir = (root() / ("fresh_" + d.head_kind)).string();
    specdec::model::DraftHead::fresh(*tiny_loaded().model, d.head_kind, "test target", 1).save(dir);
  }
  return {{d.head_param, dir}};
}

const CliMatrixTarget& target() {
  static const CliMatrixTarget t{tiny_model(), "32", {"--threads", "1"}, fresh_head};
  return t;
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
      const auto& set = kProcessorSets[si];
      const size_t pi = (di + si) % kMatrixPrompts.size();
      const std::string& prompt = kMatrixPrompts[pi];
      const char* verify = (di + si) % 2 ? "block" : "tokenwise";
      nlohmann::json& g = greedy[std::make_pair(pi, si)];
      if (g.is_null()) {
        g = cli_generate(target(), prompt, set.second);
        ASSERT_TRUE(g.contains("tokens")) << g.dump();
      }
      bool some_rejected = false;
      ASSERT_NO_FATAL_FAILURE(expect_speculative_equals_greedy(target(), prompt, set, d, verify, g, &some_rejected));
      rejected += some_rejected;
      modes_of_drafter[d.name].insert(verify);
      modes_of_set[set.first].insert(verify);
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
    EXPECT_EQ(prompts_of_drafter[d.name].size(), std::min(kMatrixPrompts.size(), kProcessorSets.size())) << d.name;
  }
  for (const auto& [set_name, set] : kProcessorSets) EXPECT_EQ(modes_of_set[set_name].size(), 2u) << set_name;
}

// Several drafters for one request (speculative's drafters, adaptive_gamma=cost), as a user
// reaches them through the CLI: the n-gram lookup and the Q4_1 draft model, chosen per round from
// a fixed table of each, print greedy's tokens with every processor set, and the stats count each
// drafter's rounds.
TEST(CliEqualityMatrixTiny, MixedDraftersEqualGreedyWithEveryProcessorSet) {
  const std::string costs = (root() / "mixed_costs.json").string();
  std::FILE* f = std::fopen(costs.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"([{"drafter": "ngram", "verify_ms": {"1": 10, "9": 10.5}, "draft_ms_per_token": 0, "acceptance": 0.9},
 {"drafter": "model", "verify_ms": {"1": 10, "9": 10.5}, "draft_ms_per_token": 1, "acceptance": 0.9}])",
             f);
  std::fclose(f);
  for (size_t si = 0; si < kProcessorSets.size(); ++si) {
    const auto& set = kProcessorSets[si];
    const std::string& prompt = kMatrixPrompts[si % kMatrixPrompts.size()];
    const nlohmann::json greedy = cli_generate(target(), prompt, set.second);
    std::vector<std::string> args = set.second;
    args.insert(args.end(), {"--strategy", "speculative", "--set", "drafters=ngram,model", "--set",
                             "adaptive_gamma=cost", "--set", "controller_costs=" + costs, "--draft", tiny_model(),
                             "--draft-dtype", "q4_1"});
    const nlohmann::json spec = cli_generate(target(), prompt, args);
    ASSERT_TRUE(spec.contains("tokens") && greedy.contains("tokens")) << spec.dump();
    EXPECT_EQ(spec["tokens"], greedy["tokens"]) << set.first;
    const auto& per = spec["stats"]["per_drafter"];
    ASSERT_TRUE(per.contains("ngram") && per.contains("model")) << set.first << ": " << spec["stats"].dump();
    EXPECT_GT(per["ngram"]["rounds"].get<int64_t>(), 0) << set.first;
    EXPECT_GT(per["model"]["rounds"].get<int64_t>(), 0) << set.first;
  }
}

// The matrix's runs go through cli::dispatch in this program; a user's go through the binary. One
// speculative run with a draft model, a processor set and block verification, and its greedy run,
// through both: the same tokens and the same counts (the binary's exit code is checked inside).
TEST(CliEqualityMatrixTiny, TheBinaryPrintsWhatTheInProcessRunsRead) {
  const auto& set = kProcessorSets[2];  // penalty + top-k
  const std::string& prompt = kMatrixPrompts[0];
  std::vector<std::string> spec = set.second;
  spec.insert(spec.end(), {"--strategy", "speculative", "--set", "drafter=model", "--set", "verify=block",
                           "--draft", tiny_model(), "--draft-dtype", "q4_1"});
  for (const auto& args : {set.second, spec}) {
    const nlohmann::json in = cli_generate(target(), prompt, args, Via::kInProcess);
    const nlohmann::json bin = cli_generate(target(), prompt, args, Via::kBinary);
    ASSERT_TRUE(in.contains("tokens") && bin.contains("tokens")) << in.dump() << "\n" << bin.dump();
    EXPECT_EQ(in.at("tokens"), bin.at("tokens"));
    EXPECT_EQ(in.at("text"), bin.at("text"));
    for (const char* k : {"n_generated", "n_drafted", "n_accepted", "n_rounds", "verify_modes"})
      EXPECT_EQ(in.at("stats").at(k), bin.at("stats").at(k)) << k;
  }
}

}  // namespace
