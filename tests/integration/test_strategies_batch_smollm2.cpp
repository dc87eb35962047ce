// Batched generation (strategies/batch.h) on SmolLM2-135M-Instruct: every sequence of a batch
// equals its batch-1 generate() token for token, at batch sizes that exercise continuous
// refill, for greedy and for seeded sampling (whatever the batch's composition and order), with
// per-request max_new_tokens, EOS and stop strings finishing each sequence at the right place.
// Heavy (~45 s on Zen 5, 561 s on a Zen 1 EPYC without AVX-512, where the tree drafters alone
// took 226 s, hence their own entry): the fast tier's twin is tests/unit/test_strategies_batch.cpp
// (Batch.*: greedy, seeded sampling, speculative and tree drafters, each sequence equal to its
// batch-1 run).
// ctest-heavy: *
// ctest-heavy-part: trees SmolLM2Batch.TreeDraftersBatchEqualsEachRequestAlone
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "model/causal_lm.h"
#include "model/layer_subset.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/smollm2.h"
#include "tests/support/smollm2_request.h"

using namespace specdec;
using namespace specdec::strategies;

namespace {

const std::string& kModel = specdec::testing_support::kSmolLM2;
using specdec::testing_support::smollm2;

class SmolLM2Batch : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  }

  static Request request(const std::string& user_text, int64_t max_new, uint64_t seed = 0) {
    return specdec::testing_support::smollm2_chat_request(user_text, max_new, seed);
  }

  // Seven prompts of different lengths and budgets: one answers with EOS early, one ends at a
  // stop string (taken from its own greedy output), one asks for no tokens at all.
  static std::vector<Request> requests(const std::string& strategy, const Params& params,
                                       const std::shared_ptr<model::CausalLM>& draft = nullptr) {
    std::vector<Request> r = {
        request("What is 2+2? Reply with the number only.", 24, 11),
        request("Write a short poem about autumn leaves falling in the park.", 28, 12),
        request("List three colours.", 12, 13),
        request("Explain in detail how a bicycle gear system works, and why cyclists change gears on hills "
                "and on flat roads.", 20, 14),
        request("Hi", 0, 15),
        request("Translate to French: good morning, how are you today?", 16, 16),
        request("Count from one to ten in words.", 30, 17),
    };
    for (Request& q : r) q.draft = draft;
    // A stop string from the middle of request 6's own output (the seeded batch-1 run).
    const Result alone = create(strategy, params)->generate(r[6], {});
    EXPECT_GT(alone.text.size(), 12u) << alone.text;
    r[6].stop.stop_strings = {alone.text.substr(alone.text.size() / 2, 3)};
    return r;
  }

  // Runs the batch and checks each sequence against generate() of its request alone: tokens,
  // text, finish reason and the streamed text.
  static std::vector<Result> expect_batch_equals_alone(const std::string& strategy, const Params& params,
                                                       const std::vector<Request>& reqs,
                                                       const std::vector<Result>& alone, int64_t batch_size) {
    SCOPED_TRACE(strategy + " batch_size " + std::to_string(batch_size));
    std::map<size_t, std::string> streamed;
    BatchOptions opt;
    opt.batch_size = batch_size;
    const std::vector<Result> got = create(strategy, params)->generate_batch(
        reqs, opt, [&](size_t i, const Tokens&, const std::string& text) { streamed[i] += text; });
    EXPECT_EQ(got.size(), reqs.size());
    if (got.size() != reqs.size()) return got;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].tokens, alone[i].tokens) << "request " << i << "\n-- alone: " << alone[i].text
                                                << "\n-- batched: " << got[i].text;
      EXPECT_EQ(got[i].text, alone[i].text) << "request " << i;
      EXPECT_EQ(got[i].finish, alone[i].finish) << "request " << i;
      EXPECT_EQ(streamed[i], got[i].text) << "request " << i;
      EXPECT_EQ(got[i].stats.n_generated, static_cast<int64_t>(got[i].tokens.size()));
      EXPECT_EQ(got[i].stats.n_prompt, static_cast<int64_t>(reqs[i].prompt.size()));
    }
    return got;
  }

  static std::vector<Result> run_alone(const std::string& strategy, const Params& params,
                                       const std::vector<Request>& reqs) {
    std::vector<Result> out;
    for (const Request& r : reqs) out.push_back(create(strategy, params)->generate(r, {}));
    return out;
  }
};

// Each finish reason occurs, and each sequence stops where batch-1 generation stops.
void expect_all_finish_reasons(const std::vector<Request>& reqs, const std::vector<Result>& alone) {
  std::map<FinishReason, int> seen;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ++seen[alone[i].finish];
    EXPECT_LE(static_cast<int64_t>(alone[i].tokens.size()), reqs[i].stop.max_new_tokens);
  }
  EXPECT_GT(seen[FinishReason::eos], 0);
  EXPECT_GT(seen[FinishReason::length], 0);
  EXPECT_EQ(seen[FinishReason::stop_string], 1);
  EXPECT_TRUE(alone[4].tokens.empty());  // max_new_tokens 0
}

TEST_F(SmolLM2Batch, GreedyBatchEqualsEachRequestAlone) {
  const Params p;
  const std::vector<Request> reqs = requests("greedy", p);
  const std::vector<Result> alone = run_alone("greedy", p, reqs);
  expect_all_finish_reasons(reqs, alone);
  for (int64_t b : {1, 3, 8}) expect_batch_equals_alone("greedy", p, reqs, alone, b);
}

TEST_F(SmolLM2Batch, SeededSamplingBatchEqualsEachRequestAloneWhateverTheComposition) {
  const Params p({{"temperature", "0.9"}, {"top_p", "0.95"}});
  std::vector<Request> reqs = requests("sampling", p);
  const std::vector<Result> alone = run_alone("sampling", p, reqs);
  expect_all_finish_reasons(reqs, alone);
  for (int64_t b : {3, 8}) expect_batch_equals_alone("sampling", p, reqs, alone, b);
  // Another composition: reversed order, so each sequence has other neighbours and slots.
  std::vector<Request> rev(reqs.rbegin(), reqs.rend());
  std::vector<Result> rev_alone(alone.rbegin(), alone.rend());
  expect_batch_equals_alone("sampling", p, rev, rev_alone, 4);
  // The seed matters: the same prompt under another seed samples other tokens.
  Request other = reqs[1];
  other.seed = 99;
  EXPECT_NE(create("sampling", p)->generate(other, {}).tokens, alone[1].tokens);
}

// The draft for the model drafter: SmolLM2 without 5 of its 30 layers (as
// test_strategies_smollm2.cpp), which disagrees with the target often enough that drafts are
// partly rejected.
std::shared_ptr<model::CausalLM> layer_subset_draft() {
  std::vector<int64_t> keep;
  for (int64_t l = 0; l < 30; ++l)
    if (l < 10 || l > 22 || (l - 10) % 3 != 0) keep.push_back(l);
  return model::make_layer_subset(smollm2().model, keep);
}

// Counts the forward calls of a model (each a draft forward the whole batch shares, or one
// sequence's).
class CountingLM : public model::CausalLM {
 public:
  explicit CountingLM(std::shared_ptr<model::CausalLM> inner) : inner_(std::move(inner)) {}
  const model::ModelConfig& config() const override { return inner_->config(); }
  model::KVCache make_cache(int64_t batch, int64_t max_seq) const override {
    return inner_->make_cache(batch, max_seq);
  }
  using model::CausalLM::forward;
  model::ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, model::KVCache& cache,
                               const model::ForwardOptions& options) override {
    ++calls;
    return inner_->forward(tokens, start_pos, cache, options);
  }
  int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  bool ragged_batches() const override { return inner_->ragged_batches(); }
  int64_t calls = 0;

 private:
  std::shared_ptr<model::CausalLM> inner_;
};

// Batched greedy speculative decoding (model drafter; layer_skip, searching its skip set on
// each prompt; the n-gram drafter with its ragged draft lengths) equals batch-1 greedy
// decoding for every sequence, and drafts were both accepted and rejected.
TEST_F(SmolLM2Batch, GreedySpeculativeBatchEqualsGreedyAlone) {
  const auto draft = layer_subset_draft();
  const std::vector<Request> reqs = requests("greedy", {}, draft);
  const std::vector<Result> alone = run_alone("greedy", {}, reqs);
  for (const char* drafter : {"model", "layer_skip", "ngram"}) {
    const Params p(
        {{"temperature", "0"}, {"drafter", drafter}, {"gamma", "4"}, {"skip_ratio", "0.2"}, {"skip_search", "4"}});
    expect_batch_equals_alone("speculative", p, reqs, alone, 3);  // refill
    BatchOptions opt;
    opt.batch_size = 8;  // everyone at once
    int64_t drafted = 0, accepted = 0, rounds = 0;
    for (const Result& r : create("speculative", p)->generate_batch(reqs, opt, {})) {
      drafted += r.stats.n_drafted;
      accepted += r.stats.n_accepted;
      rounds += r.stats.n_rounds;
    }
    std::printf("  %s: %lld of %lld draft tokens accepted in %lld rounds\n", drafter, (long long)accepted,
                (long long)drafted, (long long)rounds);
    EXPECT_GT(accepted, 0) << drafter;
    EXPECT_LT(accepted, drafted) << drafter;
  }
}

// The model drafter drafts for the whole batch in shared forwards: far fewer draft-model calls
// than the sequences' draft forwards (each sequence counts every forward it took part in, as
// alone), with every sequence's tokens still its batch-1 run's. The same for layer_skip with a
// given skip set (one subset view for all).
TEST_F(SmolLM2Batch, ADraftModelForwardServesTheWholeBatch) {
  for (const char* drafter : {"model", "layer_skip"}) {
    SCOPED_TRACE(drafter);
    auto counted = std::make_shared<CountingLM>(layer_subset_draft());
    auto target = std::make_shared<CountingLM>(smollm2().model);
    const Params p({{"temperature", "0"}, {"drafter", drafter}, {"gamma", "4"}, {"skip_layers", "10,13,16,19,22"}});
    std::vector<Request> reqs = requests("greedy", {}, counted);
    for (Request& r : reqs) r.target = target;
    const std::vector<Result> alone = run_alone("greedy", {}, reqs);
    counted->calls = target->calls = 0;
    BatchOptions opt;
    opt.batch_size = 8;
    const std::vector<Result> got = create("speculative", p)->generate_batch(reqs, opt, {});
    int64_t draft_forwards = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].tokens, alone[i].tokens) << "request " << i;
      draft_forwards += got[i].stats.n_draft_forwards;
    }
    // All the batch's model calls, draft and verification (layer_skip drafts through the target).
    const int64_t calls = counted->calls + target->calls;
    std::printf("  %s: %lld model calls in all for %lld sequence draft forwards\n", drafter, (long long)calls,
                (long long)draft_forwards);
    EXPECT_GT(draft_forwards, 40);
    EXPECT_LT(calls, draft_forwards / 2);
  }
}

// At temperature > 0 with fixed seeds, batched speculative sampling equals batch-1 speculative
// sampling with the same seeds, sequence by sequence (model drafter: q and block
// verification; n-gram drafter: tokens_only).
TEST_F(SmolLM2Batch, SeededSpeculativeSamplingBatchEqualsEachRequestAlone) {
  const auto draft = layer_subset_draft();
  for (const auto& extra : std::vector<std::map<std::string, std::string>>{
           {{"drafter", "model"}}, {{"drafter", "model"}, {"verify", "block"}}, {{"drafter", "ngram"}}}) {
    std::map<std::string, std::string> values = {{"temperature", "0.8"}, {"top_k", "50"}, {"gamma", "3"}};
    values.insert(extra.begin(), extra.end());
    const Params p(values);
    const std::vector<Request> reqs = requests("speculative", p, draft);
    const std::vector<Result> alone = run_alone("speculative", p, reqs);
    expect_batch_equals_alone("speculative", p, reqs, alone, 3);  // refill, other neighbours
  }
}

// Drafters that propose token trees batch too: each sequence's tree goes into the shared target
// forward (one tree per sequence) and the batched tree kernel. Greedy: every sequence equals
// greedy decoding alone; seeded sampling: every sequence equals its batch-1 speculative run.
// Rounds with trees happened, and some tree nodes were accepted.
TEST_F(SmolLM2Batch, TreeDraftersBatchEqualsEachRequestAlone) {
  const auto draft = layer_subset_draft();
  const std::vector<Request> greedy_reqs = requests("greedy", {}, draft);
  const std::vector<Result> greedy_alone = run_alone("greedy", {}, greedy_reqs);
  for (const std::map<std::string, std::string>& extra : std::vector<std::map<std::string, std::string>>{
           {{"drafter", "tree"}, {"tree_branching", "3,2,1"}},
           {{"drafter", "suffix"}, {"suffix_tree_width", "3"}},
           {{"drafter", "recycling"}},
           {{"drafter", "lookahead"}}}) {
    SCOPED_TRACE(extra.at("drafter"));
    std::map<std::string, std::string> values = {{"temperature", "0"}, {"gamma", "4"}};
    values.insert(extra.begin(), extra.end());
    int64_t tree_rounds = 0, accepted = 0;
    for (const Result& r : expect_batch_equals_alone("speculative", Params(values), greedy_reqs, greedy_alone, 3)) {
      tree_rounds += r.stats.n_tree_rounds;
      accepted += r.stats.n_accepted;
    }
    EXPECT_GT(tree_rounds, 0);
    EXPECT_GT(accepted, 0);
    values["temperature"] = "0.8";
    values["top_k"] = "50";
    const std::vector<Request> reqs = requests("speculative", Params(values), draft);
    expect_batch_equals_alone("speculative", Params(values), reqs, run_alone("speculative", Params(values), reqs), 4);
  }
}

}  // namespace
