// Batched generation (strategies/batch.h) on tiny random models: every sequence equals its
// batch-1 run (greedy and seeded sampling, with refill; speculative with chains and trees), the default one-by-one
// generate_batch, and bad input (batch_size < 1, a cache too small for a request, requests on
// different targets) as named errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "strategies/batch.h"
#include "strategies/registry.h"
#include "tests/support/drafter_rig.h"

using namespace specdec;
using namespace specdec::strategies;
using test_support::error_of;
using test_support::P;
using test_support::tiny;

namespace {

// Five prompts of lengths 1..9 with their own budgets and seeds, on tiny model 1.
std::vector<Request> tiny_requests() {
  const std::vector<Tokens> prompts = {{1, 5, 9}, {2}, {3, 3, 7, 1, 8, 2, 9, 4, 6}, {4, 1, 2, 3, 4}, {7, 7}};
  const std::vector<int64_t> max_new = {6, 11, 3, 0, 9};
  std::vector<Request> r;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request q;
    q.prompt = prompts[i];
    q.target = tiny(1);
    q.stop.max_new_tokens = max_new[i];
    q.seed = 100 + i;
    r.push_back(q);
  }
  r[1].stop.eos_ids = {0, 17};  // may end early; batch-1 is the oracle either way
  return r;
}

void expect_equal_to_alone(const std::string& strategy, const Params& p,
                           const std::shared_ptr<model::CausalLM>& draft = nullptr) {
  std::vector<Request> reqs = tiny_requests();
  for (Request& r : reqs) r.draft = draft;
  std::vector<Result> alone;
  for (const Request& r : reqs) alone.push_back(create(strategy, p)->generate(r, {}));
  for (int64_t b : {1, 2, 3, 8}) {
    BatchOptions opt;
    opt.batch_size = b;
    std::vector<Tokens> streamed(reqs.size());
    const std::vector<Result> got = create(strategy, p)->generate_batch(
        reqs, opt, [&](size_t i, const Tokens& t, const std::string&) {
          streamed[i].insert(streamed[i].end(), t.begin(), t.end());
        });
    ASSERT_EQ(got.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].tokens, alone[i].tokens) << strategy << " batch " << b << " request " << i;
      EXPECT_EQ(got[i].finish, alone[i].finish) << strategy << " batch " << b << " request " << i;
      EXPECT_EQ(streamed[i], got[i].tokens);
      EXPECT_EQ(got[i].stats.n_target_forwards, alone[i].stats.n_target_forwards);
    }
  }
  EXPECT_TRUE(alone[3].tokens.empty());
  EXPECT_EQ(alone[0].tokens.size(), 6u);
}

TEST(Batch, GreedyEqualsEachRequestAlone) { expect_equal_to_alone("greedy", P({})); }

TEST(Batch, SeededSamplingEqualsEachRequestAlone) {
  expect_equal_to_alone("sampling", P({{"temperature", "1.0"}, {"top_k", "20"}}));
}

// Speculative: draft model tiny(12) (many rejections), and the n-gram drafter (ragged lengths);
// greedy and seeded sampling, token-wise and block verification.
TEST(Batch, SpeculativeEqualsEachRequestAlone) {
  for (const char* t : {"0", "1.0"}) {
    SCOPED_TRACE(std::string("temperature ") + t);
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "model"}, {"gamma", "3"}}), tiny(12));
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "model"}, {"verify", "block"}}), tiny(12));
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "ngram"}, {"ngram_min", "1"}}));
  }
  // Greedy speculative is greedy decoding.
  std::vector<Request> reqs = tiny_requests();
  for (Request& r : reqs) r.draft = tiny(12);
  BatchOptions opt;
  opt.batch_size = 3;
  const auto got = create("speculative", P({{"temperature", "0"}, {"drafter", "model"}}))->generate_batch(reqs, opt, {});
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].tokens, create("greedy", P({}))->generate(reqs[i], {}).tokens);
}

// Phases of batched sequences are charged as batch-1 runs charge them: the forward that prefills
// a sequence's prompt (shared with the others' rows) as prefill, later target forwards as verify
// (autoregressive: one decode step; speculative: one verification round); each sequence's phases
// add up to its wall time from when it joined.
TEST(Batch, APromptsForwardIsPrefillAndLaterForwardsVerify) {
  std::vector<Request> reqs = tiny_requests();
  for (Request& r : reqs) r.draft = tiny(12);
  BatchOptions opt;
  opt.batch_size = 2;
  for (const char* strategy : {"greedy", "speculative"}) {
    const Params p = std::string(strategy) == "greedy" ? P({}) : P({{"temperature", "0"}, {"drafter", "model"}});
    // Up to three runs (test_support::phases_add_up; CI once saw 0.26 ms missing of 4.15).
    const auto all_add_up = [](const std::vector<Result>& rs) {
      return std::all_of(rs.begin(), rs.end(), [](const Result& r) { return test_support::phases_add_up(r.stats, 0.5); });
    };
    std::vector<Result> got = create(strategy, p)->generate_batch(reqs, opt, {});
    for (int retry = 0; retry < 2 && !all_add_up(got); ++retry)
      got = create(strategy, p)->generate_batch(reqs, opt, {});
    double verify = 0;  // a round where another sequence joins is prefill for all: summed over sequences
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE(std::string(strategy) + " request " + std::to_string(i));
      const Stats& st = got[i].stats;
      if (reqs[i].stop.max_new_tokens == 0) continue;  // never joined a forward
      EXPECT_GT(st.phase_ms.prefill, 0);
      verify += st.phase_ms.verify;
      EXPECT_NEAR(st.phase_ms.sum(), st.ms_total, 0.05 * st.ms_total + 0.5);
    }
    EXPECT_GT(verify, 0) << strategy;
  }
}

// Token trees batch too (one tree per sequence in the target forward, the batched tree kernel,
// per-slot KV compaction): the tree drafter (draft model tiny(12)) and suffix lookup with a
// trie, greedy and seeded sampling.
TEST(Batch, TreeDraftersEqualEachRequestAlone) {
  for (const char* t : {"0", "1.0"}) {
    SCOPED_TRACE(std::string("temperature ") + t);
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "tree"}, {"tree_branching", "2,2"}}),
                          tiny(12));
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "suffix"}, {"suffix_tree_width", "3"}}));
  }
}

// The other drafters batch too: layer_skip (the target without its second layer drafting for
// itself, through the target's own batched forward), recycling and lookahead (trees from the
// target's own past), greedy and seeded sampling.
TEST(Batch, SelfDraftingAndRetrievalDraftersEqualEachRequestAlone) {
  for (const char* t : {"0", "1.0"}) {
    SCOPED_TRACE(std::string("temperature ") + t);
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "layer_skip"}, {"skip_layers", "1"}}));
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "recycling"}}));
    expect_equal_to_alone("speculative", P({{"temperature", t}, {"drafter", "lookahead"}}));
  }
}

TEST(Batch, DefaultRunsRequestsOneByOne) {  // beam search has no batched loop of its own
  const std::vector<Request> reqs = tiny_requests();
  BatchOptions opt;
  opt.batch_size = 2;
  const std::vector<Result> got = create("beam", P({{"num_beams", "2"}}))->generate_batch(reqs, opt, {});
  ASSERT_EQ(got.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(got[i].tokens, create("beam", P({{"num_beams", "2"}}))->generate(reqs[i], {}).tokens);
}

TEST(Batch, BadInputGivesNamedErrors) {
  std::vector<Request> reqs = tiny_requests();
  for (const char* name : {"greedy", "sampling", "beam"}) {
    SCOPED_TRACE(name);
    auto s = create(name, P({}));
    BatchOptions opt;
    opt.batch_size = 0;
    EXPECT_EQ(error_of([&] { s->generate_batch(reqs, opt, {}); }), "batch: batch_size must be >= 1, got 0");
    opt.batch_size = -3;
    EXPECT_EQ(error_of([&] { s->generate_batch(reqs, opt, {}); }), "batch: batch_size must be >= 1, got -3");
    opt.batch_size = 2;
    opt.cache_positions = 12;  // requests 1 and 2: prompt 1 + 11 new (9 + 3) + 1 spare = 13
    EXPECT_EQ(error_of([&] { s->generate_batch(reqs, opt, {}); }),
              "batch: request 1 (prompt 1 tokens + max_new_tokens 11 + 1 spare) needs 13 KV-cache positions, "
              "cache_positions is 12");
    opt.cache_positions = -1;
    EXPECT_NE(error_of([&] { s->generate_batch(reqs, opt, {}); }).find("batch: cache_positions must be >= 0 (0: sized from the requests), got -1"),
              std::string::npos);
    opt.cache_positions = 0;
    std::vector<Request> mixed = reqs;
    mixed[3].target = tiny(2);
    EXPECT_EQ(error_of([&] { s->generate_batch(mixed, opt, {}); }),
              "batch: request 3 has another target model than request 0 (a batch shares the target's forwards)");
    mixed = reqs;
    mixed[4].prompt.clear();
    EXPECT_NE(error_of([&] { s->generate_batch(mixed, opt, {}); }).find("batch: request 4: request has an empty prompt"),
              std::string::npos);
    EXPECT_TRUE(s->generate_batch({}, opt, {}).empty());
  }
  // A cache of exactly what the longest request needs is enough.
  BatchOptions fits;
  fits.batch_size = 2;
  fits.cache_positions = 13;
  EXPECT_EQ(create("greedy", P({}))->generate_batch(reqs, fits, {}).size(), reqs.size());
}

}  // namespace
