#pragma once
// The device path of the decoding loop (the model computed with LibTorch ops, engine aten, on a
// device; its KV cache there; verification and tree compaction through that device's
// kernels::Backend), written once for any target and compiled twice:
//   tests/unit/test_strategies_device_tiny.cpp              a tiny random Llama (vocab 32): seconds,
//                                                           on "cpu" and "cpu_graphs"
//   tests/integration/test_strategies_device_smollm2.cpp    SmolLM2-135M, also on "cuda" (skips
//                                                           without a GPU; scripts/gpu_check.sh)
// The including file defines `const DeviceTarget& dut()` (the target under test) and instantiates
// the parameterised suite OnDevice with its devices: "cpu" (eager), "cpu_graphs" (the static steps
// on the CPU, uncaptured: the graph path's twin in CI) or "cuda" (static steps captured as CUDA
// graphs).
//  - greedy speculative decoding equals greedy on the same engine, token for token, for the
//    chain drafters and for token trees (which compact the device KV cache), with some rounds
//    rejecting part of a draft;
//  - greedy on the aten engine equals greedy on the packed CPU engine for the test prompts;
//  - batches give each request its batch-1 tokens;
//  - speculative sampling runs and is reproducible with a seed;
//  - host reads: one a greedy step, one a speculative round (chains, trees, batches, penalties);
//  - trained drafters' heads (untrained here) draft where the target is, one read a round;
//  - structured output: each target row masked where the logits are, constrained greedy kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/host_reads.h"
#include "model/causal_lm.h"
#include "model/draft_heads.h"
#include "sampling/grammar.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"

namespace specdec::testing_support {

// The target under test.
struct DeviceTarget {
  std::string name;  // the fresh heads' target name (and their temporary directory's)
  std::string file;  // a file the target is loaded from, which SetUp requires (empty: none)
  // The target on a test's device ("cpu", "cpu_graphs", "cuda"), engine "aten", or "packed" on
  // "cpu". Each call loads a fresh model; its tokenizer may be null (token-id prompts, no eos).
  std::function<model::LoadedModel(const std::string& device, const std::string& engine)> load;
  // A draft that disagrees with the target often enough: the target without some of its layers.
  std::function<std::shared_ptr<model::CausalLM>(const std::shared_ptr<model::CausalLM>&)> skipping_draft;
  // Prompt i (0, 1: the tests' prompts; 2: a batch's third) for a model of load().
  std::function<Tokens(const model::LoadedModel&, size_t i)> prompt;
  // The tests that check the static steps (cpu_graphs, cuda) skip the eager "cpu" param where
  // this is false (SmolLM2: CI's time); the eager path's own checks are test_model_aten's.
  bool static_tests_on_eager = false;
  // A target with a tokenizer on a test's device, engine "aten", for structured output (unset:
  // load(device, "aten"), whose tokenizer must then exist).
  std::function<model::LoadedModel(const std::string& device)> load_with_tokenizer;
};

}  // namespace specdec::testing_support

const specdec::testing_support::DeviceTarget& dut();

using namespace specdec;
using namespace specdec::strategies;

namespace {

bool is_cuda(const std::string& param) { return param.rfind("cuda", 0) == 0; }

Params params(std::map<std::string, std::string> p) {
  if (!p.count("temperature")) p["temperature"] = "0";
  return Params(p);
}

class OnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!dut().file.empty())
      ASSERT_TRUE(std::filesystem::exists(dut().file))
          << dut().file << " is missing: run `scripts/fetch_models.sh " << dut().name << "`";
    if (is_cuda(GetParam()) && !at::hasCUDA()) {
      // scripts/test.sh --gpu sets SPECDEC_REQUIRE_CUDA: there a missing CUDA is a failure.
      ASSERT_EQ(std::getenv("SPECDEC_REQUIRE_CUDA"), nullptr) << "no CUDA device or no CUDA LibTorch";
      GTEST_SKIP() << "no CUDA device / no CUDA LibTorch here";
    }
  }
  // The static steps' tests: skipped on the eager "cpu" param unless the target allows.
  bool static_steps_only() const { return GetParam() == "cpu" && !dut().static_tests_on_eager; }
  static model::LoadedModel load(const std::string& device, const std::string& engine) {
    return dut().load(device, engine);
  }
  static Request request(const model::LoadedModel& m, size_t prompt, int64_t max_new) {
    Request r;
    r.target = m.model;
    r.tokenizer = m.tokenizer;
    r.prompt = dut().prompt(m, prompt);
    if (m.tokenizer) r.stop.eos_ids = m.tokenizer->eos_ids();
    r.stop.max_new_tokens = max_new;
    return r;
  }
};

TEST_P(OnDevice, GreedySpeculativeEqualsGreedyForChainsAndTrees) {
  // The GPU's path is the static steps' (cpu_graphs, cuda), whose tree growth forwards run eager
  // too; the eager path alone is held to the packed engine by GreedyEqualsThePackedCpuEngine and
  // test_model_aten. (Skipping it on SmolLM2 keeps CI within its 90 minutes: 1.6 min on this test.)
  if (static_steps_only()) GTEST_SKIP() << "the static steps' test (cpu_graphs, cuda)";
  const model::LoadedModel m = load(GetParam(), "aten");
  ASSERT_EQ(m.model->device().is_cuda(), is_cuda(GetParam()));
  const auto draft = dut().skipping_draft(m.model);
  const std::vector<std::pair<std::map<std::string, std::string>, bool>> cases = {
      {{{"drafter", "model"}}, true},
      {{{"drafter", "model"}, {"verify", "block"}}, true},
      {{{"drafter", "tree"}, {"tree_branching", "3,2,2,1"}}, true},
      {{{"drafter", "ngram"}}, false},
  };
  int64_t partial = 0;
  for (size_t prompt : {0, 1}) {
    Request req = request(m, prompt, 32);
    const Result base = create("greedy", params({}))->generate(req, {});
    for (const auto& [p, needs_draft] : cases) {
      req.draft = needs_draft ? draft : nullptr;
      const Result spec = create("speculative", params(p))->generate(req, {});
      EXPECT_EQ(spec.tokens, base.tokens) << p.at("drafter") << "\n-- greedy: " << base.text << "\n-- spec: " << spec.text;
      EXPECT_GT(spec.stats.n_accepted, 0) << p.at("drafter");
      partial += spec.stats.n_accepted < spec.stats.n_drafted;
      std::printf("prompt %zu, %s%s: %lld of %lld drafts accepted in %lld rounds\n", prompt, p.at("drafter").c_str(),
                  p.count("verify") ? " (block)" : "", static_cast<long long>(spec.stats.n_accepted),
                  static_cast<long long>(spec.stats.n_drafted), static_cast<long long>(spec.stats.n_rounds));
    }
  }
  EXPECT_GT(partial, 0) << "no round rejected a draft token: rollback and compaction went untested";
}

TEST_P(OnDevice, GreedyEqualsThePackedCpuEngine) {
  const model::LoadedModel dev = load(GetParam(), "aten");
  const model::LoadedModel cpu = load("cpu", "packed");
  for (size_t prompt : {0, 1}) {
    const Result a = create("greedy", params({}))->generate(request(dev, prompt, 32), {});
    const Result b = create("greedy", params({}))->generate(request(cpu, prompt, 32), {});
    EXPECT_EQ(a.tokens, b.tokens) << "\n-- aten: " << a.text << "\n-- packed: " << b.text;
  }
}

// Batches on the device engine (its ragged forwards, ForwardOptions::n_fed, and a token tree
// per sequence): three requests, two at a time with refill, give each request its batch-1
// tokens, for greedy and for speculative decoding with a batched draft model, with a tree
// of it, and with n-grams.
TEST_P(OnDevice, BatchesGiveEachRequestItsBatch1Tokens) {
  // The eager path's ragged forwards are test_model_aten's (RaggedBatchesAndTreesPerSequence...);
  // here the static steps, which a GPU captures.
  if (static_steps_only()) GTEST_SKIP() << "the static steps' test (cpu_graphs, cuda)";
  const model::LoadedModel m = load(GetParam(), "aten");
  ASSERT_TRUE(m.model->ragged_batches());
  const auto draft = dut().skipping_draft(m.model);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> cases = {
      {"greedy", {}},
      {"speculative", {{"drafter", "model"}}},
      {"speculative", {{"drafter", "tree"}, {"tree_branching", "2,2,1"}}},
      {"speculative", {{"drafter", "ngram"}}}};
  for (const auto& [name, p] : cases) {
    const std::string what = name + (p.count("drafter") ? " " + p.at("drafter") : "");
    std::vector<Request> reqs;
    for (size_t prompt : {0, 1, 2}) {
      reqs.push_back(request(m, prompt, 16));
      if (p.count("drafter") && p.at("drafter") != "ngram") reqs.back().draft = draft;
    }
    const std::vector<Result> batch = create(name, params(p))->generate_batch(reqs, {2, 0}, {});
    ASSERT_EQ(batch.size(), reqs.size());
    int64_t accepted = 0, drafted = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Result alone = create(name, params(p))->generate(reqs[i], {});
      EXPECT_EQ(batch[i].tokens, alone.tokens) << what << ", request " << i << "\n-- batch: " << batch[i].text
                                               << "\n-- alone: " << alone.text;
      accepted += batch[i].stats.n_accepted;
      drafted += batch[i].stats.n_drafted;
    }
    if (name == "speculative") EXPECT_GT(accepted, 0) << what;
    std::printf("batch, %s: %lld of %lld drafts accepted\n", what.c_str(), static_cast<long long>(accepted),
                static_cast<long long>(drafted));
  }
}

TEST_P(OnDevice, SeededSpeculativeSamplingIsReproducible) {
  const model::LoadedModel m = load(GetParam(), "aten");
  Request req = request(m, 0, 24);
  req.draft = m.model;
  req.seed = 7;
  const Params p({{"temperature", "0.8"}, {"drafter", "model"}});
  const Result r1 = create("speculative", p)->generate(req, {});
  const Result r2 = create("speculative", p)->generate(req, {});
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_GT(r1.stats.n_accepted, 0) << "draft = target: nearly every token is accepted";
}

// Every host read of device data goes through one counter (core/host_reads.h), on the CPU too,
// so these bounds hold for the GPU whatever device runs them. Greedy: one read per step (the
// token; the logits' finiteness flag rides with it, model::check_later). A speculative round
// with a drafter that runs on the host, chains (ngram, suffix) or trees (recycling, which also
// takes the target's top-k rows: they ride with the verdict, model::to_host_async): one read,
// the verdict; acceptance, residual sampling, rollback and tree compaction stay on the device.
// A draft model's chain too: its loop picks each token on the device and feeds it to its next
// forward from there (sampling::pick_tokens), greedy or drawn from q, and the drafted tokens
// stay there for the target's forward and the verifier; they come to the host with the verdict
// (DraftProposal::drawn), in a batch too. A repetition penalty reads none of them either: the
// draft loop's rows and the target's see the draft's paths where they are
// (sampling::DeviceDraft), and its tokens equal greedy's with the same penalty. The draft
// model's static tree (drafter tree, tree_budget 0) knows its shape before its tokens: they
// stay on the device too, each depth fed from there, one read a round. A dynamic tree grows
// there as well (each depth's frontier chosen on the device and fed with its parents there,
// ForwardOptions::device_parents), its budget's nodes are chosen there, and the target and the
// verifier take its tokens and parents from there: one read a round, the verdict.
TEST_P(OnDevice, HostReadsPerStepAndRound) {
  const model::LoadedModel m = load(GetParam(), "aten");
  const int64_t r0 = host_reads();
  const Result g = create("greedy", params({}))->generate(request(m, 1, 24), {});
  const int64_t greedy_reads = host_reads() - r0;
  EXPECT_EQ(greedy_reads, g.stats.n_target_forwards);
  std::printf("host reads (%s): greedy %lld for %lld steps\n", GetParam().c_str(), static_cast<long long>(greedy_reads),
              static_cast<long long>(g.stats.n_target_forwards));
  // Beam search: one read a step, its candidates (their scores ride with them). (The cache's
  // reorder moves on the device; a GPU backend still waits there for its status check.)
  const int64_t rb = host_reads();
  const Params beam_params(std::map<std::string, std::string>{{"num_beams", "2"}});
  const Result beam = create("beam", beam_params)->generate(request(m, 1, 8), {});
  const int64_t beam_reads = host_reads() - rb;
  EXPECT_LE(beam_reads, beam.stats.n_target_forwards);
  std::printf("host reads (%s): beam %lld for %lld steps\n", GetParam().c_str(), static_cast<long long>(beam_reads),
              static_cast<long long>(beam.stats.n_target_forwards));
  // drafter -> reads per round allowed
  for (const auto& [drafter, per_round] : std::vector<std::pair<std::string, int64_t>>{
           {"ngram", 1}, {"suffix", 1}, {"recycling", 1}, {"model", 1}}) {
    Request req = request(m, 1, 24);
    req.draft = m.model;
    const int64_t r1 = host_reads();
    const Result r = create("speculative", params({{"drafter", drafter}, {"gamma", "4"}}))->generate(req, {});
    const int64_t reads = host_reads() - r1;
    ASSERT_GT(r.stats.n_rounds, 0) << drafter;
    EXPECT_EQ(r.tokens, g.tokens) << drafter;
    EXPECT_LE(reads, per_round * r.stats.n_rounds) << drafter << ": " << reads << " reads in " << r.stats.n_rounds << " rounds";
    std::printf("host reads (%s): speculative %s %lld for %lld rounds (%lld tree rounds)\n", GetParam().c_str(),
                drafter.c_str(), static_cast<long long>(reads), static_cast<long long>(r.stats.n_rounds),
                static_cast<long long>(r.stats.n_tree_rounds));
  }
  // The draft model at temperature > 0 (q and the draws on the device), and with a repetition
  // penalty; its trees: static ones, top-k at T = 0 and sampled at T = 0.8, and a dynamic one at
  // T = 0, each with the penalty too (one read each, the verdict).
  const Result gp = create("greedy", params({{"repetition_penalty", "1.3"}}))->generate(request(m, 1, 24), {});
  ASSERT_NE(gp.tokens, g.tokens) << "the penalty changes the text, so the equality below sees it";
  for (const auto& [extra, per_round] : std::vector<std::pair<std::map<std::string, std::string>, int64_t>>{
           {{{"temperature", "0.8"}}, 1},
           {{{"repetition_penalty", "1.3"}}, 1},
           {{{"repetition_penalty", "1.3"}, {"temperature", "0.8"}}, 1},
           {{{"drafter", "tree"}, {"tree_budget", "8"}, {"tree_topk", "3"}}, 1},
           {{{"drafter", "tree"}, {"tree_budget", "8"}, {"tree_topk", "3"}, {"repetition_penalty", "1.3"}}, 1},
           {{{"drafter", "tree"}, {"tree_branching", "3,2,1"}}, 1},
           {{{"drafter", "tree"}, {"tree_branching", "3,2,1"}, {"repetition_penalty", "1.3"}}, 1},
           {{{"drafter", "tree"}, {"tree_branching", "2,2,1"}, {"temperature", "0.8"}}, 1},
           {{{"drafter", "tree"}, {"tree_branching", "2,2,1"}, {"temperature", "0.8"}, {"repetition_penalty", "1.3"}},
            1}}) {
    Request req = request(m, 1, 24);
    req.draft = m.model;
    req.seed = 5;
    std::map<std::string, std::string> p = {{"drafter", "model"}, {"gamma", "4"}};
    std::string what;
    for (const auto& [key, value] : extra) {
      p[key] = value;
      what += (what.empty() ? "" : ", ") + key + "=" + value;
    }
    const int64_t r1 = host_reads();
    const Result r = create("speculative", params(p))->generate(req, {});
    const int64_t reads = host_reads() - r1;
    ASSERT_GT(r.stats.n_rounds, 0) << what;
    EXPECT_GT(r.stats.n_accepted, r.stats.n_rounds) << what << ": the same weights draft, so most tokens are accepted";
    if (!p.count("temperature")) EXPECT_EQ(r.tokens, p.count("repetition_penalty") ? gp.tokens : g.tokens) << what;
    EXPECT_LE(reads, per_round * r.stats.n_rounds) << what << ": " << reads << " reads in " << r.stats.n_rounds << " rounds";
    std::printf("host reads (%s): speculative model, %s: %lld for %lld rounds\n", GetParam().c_str(), what.c_str(),
                static_cast<long long>(reads), static_cast<long long>(r.stats.n_rounds));
  }
  // A batch of two with the draft model: the slots' chains and static trees stay on the draft's
  // device as well, so a batch round costs one read, the verdict of both. They start together,
  // so the batch runs as many rounds as its longer sequence. With n-grams at T = 0.8 some rounds
  // find no draft for a sequence: its plain step is a chain of 0 drafts in the same kernel call.
  // With a repetition penalty too (1: off).
  for (const auto& [drafter, temperature, penalty] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"model", "0", "1"},
           {"model", "0.8", "1"},
           {"model", "0.8", "1.3"},
           {"tree", "0", "1"},
           {"tree", "0", "1.3"},
           {"tree", "0.8", "1"},
           {"ngram", "0.8", "1"}}) {
    std::vector<Request> reqs;
    for (size_t prompt : {0, 1}) {
      reqs.push_back(request(m, prompt, 24));
      reqs.back().draft = m.model;
      reqs.back().seed = 5;
    }
    const int64_t r1 = host_reads();
    const std::vector<Result> batch = create("speculative", params({{"drafter", drafter},
                                                                    {"tree_branching", "2,2,1"},
                                                                    {"gamma", "4"},
                                                                    {"temperature", temperature},
                                                                    {"repetition_penalty", penalty}}))
                                          ->generate_batch(reqs, {2, 0}, {});
    const int64_t reads = host_reads() - r1;
    int64_t rounds = 0, tree_rounds = 0;
    for (const Result& r : batch) rounds = std::max(rounds, r.stats.n_rounds), tree_rounds += r.stats.n_tree_rounds;
    const std::string what = "batch, " + drafter + ", temperature " + temperature + ", repetition penalty " + penalty;
    ASSERT_GT(rounds, 0) << what;
    EXPECT_EQ(tree_rounds > 0, drafter == "tree") << what;  // (ngram: a miss is a plain step)
    EXPECT_LE(reads, rounds) << what << ": " << reads << " reads in " << rounds << " rounds";
    std::printf("host reads (%s): %s: %lld for %lld batch rounds\n", GetParam().c_str(), what.c_str(),
                static_cast<long long>(reads), static_cast<long long>(rounds));
  }
}

// The trained drafters' heads run where the target's features are (a GPU target: on the GPU,
// trained_head.h): the features, the head's layers and KV cache, its output head and the picks
// stay there, and the drafted tokens reach the host with the verdict, one read a round, for
// chains and static trees. A dynamic tree grows there too (each depth's frontier chosen and fed
// without a read), its budget's nodes are chosen there, and the target's forward and the
// verifier take its tokens and parents from there: one read a round as well, with a repetition
// penalty too (its tokens then equal penalised greedy's). The heads here are untrained
// (model::DraftHead::fresh): where tensors live and what the host reads does not depend on what
// a head learned; greedy equality holds for any head (lossless).
TEST_P(OnDevice, TrainedHeadsDraftWhereTheTargetIsWithOneReadARound) {
  // The eager path places the same tensors in the same places: the static steps' run suffices.
  if (static_steps_only()) GTEST_SKIP() << "the static steps' test (cpu_graphs, cuda)";
  const model::LoadedModel m = load(GetParam(), "aten");
  const std::string dir = ::testing::TempDir() + "/specdec_device_heads_" + dut().name + "_" + GetParam();
  model::DraftHead::fresh(*m.model, "eagle", dut().name, 1).save(dir + "/eagle");
  model::DraftHead::fresh(*m.model, "medusa", dut().name, 1, 0, 3).save(dir + "/medusa");
  const Result g = create("greedy", params({}))->generate(request(m, 0, 16), {});
  // With a repetition penalty, the second prompt (SmolLM2's first ends at once with it).
  const Result gp = create("greedy", params({{"repetition_penalty", "1.3"}}))->generate(request(m, 1, 16), {});
  ASSERT_EQ(gp.tokens.size(), 16u) << "the penalty's text runs to the length";
  struct Case {
    std::map<std::string, std::string> p;
    int64_t per_round;
  };
  const std::map<std::string, std::string> eagle = {{"drafter", "eagle"}, {"eagle_head", dir + "/eagle"}};
  const std::map<std::string, std::string> medusa = {{"drafter", "medusa"}, {"medusa_head", dir + "/medusa"}};
  const auto with = [](std::map<std::string, std::string> p, const std::map<std::string, std::string>& extra) {
    for (const auto& [k, v] : extra) p[k] = v;
    return p;
  };
  for (const Case& c : std::vector<Case>{
           {eagle, 1},
           {with(eagle, {{"temperature", "0.8"}}), 1},
           {with(eagle, {{"eagle_shape", "tree"}, {"tree_branching", "2,2,1"}, {"tree_budget", "0"}}), 1},
           {with(eagle, {{"eagle_shape", "tree"}, {"tree_budget", "6"}, {"tree_topk", "2"}}), 1},
           {with(eagle, {{"eagle_shape", "tree"}, {"tree_budget", "6"}, {"tree_topk", "2"}, {"temperature", "0.8"}}),
            1},
           {with(eagle, {{"repetition_penalty", "1.3"}}), 1},
           {with(eagle, {{"eagle_shape", "tree"}, {"tree_budget", "6"}, {"tree_topk", "2"}, {"repetition_penalty", "1.3"}}),
            1},
           {medusa, 1},
           {with(medusa, {{"temperature", "0.8"}}), 1},
           {with(medusa, {{"medusa_shape", "tree"}, {"tree_branching", "2,2,1"}, {"tree_budget", "0"}}), 1},
           {with(medusa, {{"medusa_shape", "tree"}, {"tree_budget", "6"}, {"tree_topk", "2"}}), 1},
           {with(medusa, {{"repetition_penalty", "1.3"}}), 1},
           {with(medusa, {{"medusa_shape", "tree"}, {"tree_branching", "2,2,1"}, {"tree_budget", "0"},
                          {"repetition_penalty", "1.3"}}),
            1}}) {
    std::map<std::string, std::string> p = with(c.p, {{"gamma", "3"}});
    std::string what;
    for (const auto& [k, v] : p)
      if (k.find("_head") == std::string::npos) what += (what.empty() ? "" : ", ") + k + "=" + v;
    Request req = request(m, p.count("repetition_penalty") ? 1 : 0, 16);
    req.seed = 5;
    const int64_t r0 = host_reads();
    const Result r = create("speculative", params(p))->generate(req, {});
    const int64_t reads = host_reads() - r0;
    ASSERT_GT(r.stats.n_rounds, 0) << what;
    if (!p.count("temperature")) EXPECT_EQ(r.tokens, p.count("repetition_penalty") ? gp.tokens : g.tokens) << what;
    EXPECT_LE(reads, c.per_round * r.stats.n_rounds) << what << ": " << reads << " reads in " << r.stats.n_rounds
                                                    << " rounds";
    std::printf("host reads (%s): speculative %s: %lld for %lld rounds, %lld of %lld drafts accepted\n",
                GetParam().c_str(), what.c_str(), static_cast<long long>(reads), static_cast<long long>(r.stats.n_rounds),
                static_cast<long long>(r.stats.n_accepted), static_cast<long long>(r.stats.n_drafted));
  }
  // A batch of two EAGLE chains, and of two EAGLE dynamic trees (each drafted in lockstep): one
  // read a batch round, and each request gets its batch-1 tokens. (The untrained head's rounds
  // emit one token each, so the last round, one token left, drafts nothing: its plain steps ride
  // with the verdict too.)
  for (const auto& [what, extra] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"eagle chains", {}},
           {"eagle dynamic trees", {{"eagle_shape", "tree"}, {"tree_budget", "6"}, {"tree_topk", "2"}}}}) {
    std::vector<Request> reqs = {request(m, 0, 12), request(m, 1, 12)};
    const auto spec = create("speculative", params(with(with(eagle, extra), {{"gamma", "3"}})));
    const int64_t r0 = host_reads();
    const std::vector<Result> batch = spec->generate_batch(reqs, {2, 0}, {});
    const int64_t reads = host_reads() - r0;
    int64_t rounds = 0, tree_rounds = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      rounds = std::max(rounds, batch[i].stats.n_rounds);
      tree_rounds += batch[i].stats.n_tree_rounds;
      EXPECT_EQ(batch[i].tokens, spec->generate(reqs[i], {}).tokens) << what << ", request " << i;
    }
    ASSERT_LE(batch[0].tokens.size(), g.tokens.size());  // request 0 is greedy's prompt: its tokens are greedy's
    EXPECT_TRUE(std::equal(batch[0].tokens.begin(), batch[0].tokens.end(), g.tokens.begin())) << what;
    EXPECT_EQ(tree_rounds > 0, !extra.empty()) << what;
    EXPECT_LE(reads, rounds) << what << ": " << reads << " reads in " << rounds << " batch rounds";
    std::printf("host reads (%s): batch of 2, %s: %lld for %lld batch rounds\n", GetParam().c_str(), what.c_str(),
                static_cast<long long>(reads), static_cast<long long>(rounds));
  }
}

// Structured output on the device (issue 57, item 4). The grammar's masks are made on the host
// (xgrammar's matcher after each row's path) and applied where the logits are; the matcher needs
// each round's drafted tokens on the host. At T = 0 constrained speculative decoding equals
// constrained greedy on the same device: a host drafter (n-gram with the grammar's jump-forward
// tokens), the draft model's chain and static tree (their rows masked as they draft), the chain
// with draft_mask off, the cost controller over both drafters, and a batch of two. What the host
// reads, per round (the counter of core/host_reads.h, the same on every device):
//  - greedy: one a step, the token;
//  - a host drafter: one, the verdict (its draft is on the host already);
//  - the draft model with masked rows: each drafted token before its next row, and the verdict
//    (chains: gamma + 1; a static tree: a read a depth, and the verdict);
//  - the draft model with draft_mask off: its chain stays on the device while it drafts, and is
//    read once for the target's masks before the verdict: two.
TEST_P(OnDevice, ConstrainedDecodingKeepsConstrainedGreedyAndReadsWhatTheMatcherNeeds) {
  if (static_steps_only()) GTEST_SKIP() << "the static steps' test (cpu_graphs, cuda)";
  const model::LoadedModel m = dut().load_with_tokenizer ? dut().load_with_tokenizer(GetParam()) : load(GetParam(), "aten");
  ASSERT_NE(m.tokenizer, nullptr);
  ASSERT_EQ(m.model->device().is_cuda(), is_cuda(GetParam()));
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "count": {"type": "integer"}},)"
      R"( "required": ["name", "count"]})";
  const auto constrained = [&](std::map<std::string, std::string> p) {
    p["json_schema"] = schema;
    return params(p);
  };
  const auto req_for = [&](const std::string& prompt) {
    Request r;
    r.target = m.model;
    r.tokenizer = m.tokenizer;
    r.draft = m.model;  // the target drafts for itself: most drafts are accepted
    r.prompt = m.tokenizer->encode(prompt, true);
    r.stop.eos_ids = m.tokenizer->eos_ids();
    r.stop.max_new_tokens = 24;
    return r;
  };
  const Request req = req_for("A person as JSON: ");
  const int64_t r0 = host_reads();
  const Result g = create("greedy", constrained({}))->generate(req, {});
  const int64_t greedy_reads = host_reads() - r0;
  ASSERT_GT(g.tokens.size(), 4u) << g.text;
  EXPECT_EQ(g.text.rfind("{", 0), 0u) << "the schema's object starts the output: " << g.text;
  EXPECT_LE(greedy_reads, g.stats.n_target_forwards) << "constrained greedy: one read a step";
  std::printf("constrained (%s): greedy %lld reads for %lld steps: %s\n", GetParam().c_str(),
              static_cast<long long>(greedy_reads), static_cast<long long>(g.stats.n_target_forwards), g.text.c_str());
  struct Case {
    std::map<std::string, std::string> p;
    int64_t per_round;  // reads a round at most
  };
  int64_t jumped = 0;
  for (const Case& c : std::vector<Case>{
           {{{"drafter", "ngram"}, {"jump_forward", "true"}}, 1},
           {{{"drafter", "model"}, {"gamma", "3"}}, 4},
           {{{"drafter", "model"}, {"gamma", "3"}, {"draft_mask", "false"}}, 2},
           {{{"drafter", "tree"}, {"tree_branching", "2,2,1"}}, 4},
           {{{"drafters", "ngram,model"}, {"adaptive_gamma", "cost"}, {"jump_forward", "true"}}, 0}}) {
    std::string what;
    for (const auto& [k, v] : c.p) what += (what.empty() ? "" : ", ") + k + "=" + v;
    const int64_t r1 = host_reads();
    const Result r = create("speculative", constrained(c.p))->generate(req, {});
    const int64_t reads = host_reads() - r1;
    ASSERT_GT(r.stats.n_rounds, 0) << what;
    EXPECT_EQ(r.tokens, g.tokens) << what << "\n-- constrained greedy: " << g.text << "\n-- speculative: " << r.text;
    if (!c.p.count("draft_mask"))
      EXPECT_EQ(r.stats.n_refused, 0) << what << ": every built-in drafter drafts inside the grammar";
    if (c.per_round > 0)
      EXPECT_LE(reads, c.per_round * r.stats.n_rounds) << what << ": " << reads << " reads in " << r.stats.n_rounds << " rounds";
    jumped += r.stats.n_forced + r.stats.n_jump_drafted;
    std::printf("constrained (%s): speculative %s: %lld reads for %lld rounds, %lld of %lld drafts accepted, %lld forced, "
                "%lld jump\n",
                GetParam().c_str(), what.c_str(), static_cast<long long>(reads), static_cast<long long>(r.stats.n_rounds),
                static_cast<long long>(r.stats.n_accepted), static_cast<long long>(r.stats.n_drafted),
                static_cast<long long>(r.stats.n_forced), static_cast<long long>(r.stats.n_jump_drafted));
  }
  EXPECT_GT(jumped, 0) << "no forced or jump-forward token: the schema's keys went untested";
  // A batch of two (one matcher a sequence): each request gets its batch-1 tokens.
  std::vector<Request> reqs = {req, req_for("Another person, as JSON: ")};
  const auto spec = create("speculative", constrained({{"drafter", "model"}, {"gamma", "3"}}));
  const std::vector<Result> batch = spec->generate_batch(reqs, {2, 0}, {});
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].tokens, g.tokens) << "batch, request 0";
  EXPECT_EQ(batch[1].tokens, create("greedy", constrained({}))->generate(reqs[1], {}).tokens) << "batch, request 1";
}

}  // namespace
