// Drafters that learn from the target's own rows (Drafter::target_wants / observe), reached
// through the registry: recycling (Token Recycling's adjacency table: rows from observe(),
// overwritten, accepted path wins, prompt bigrams, the static tree's exact shape) and lookahead
// (pool from the prompt, Jacobi window update and realignment, n-grams along the trajectory's
// diagonal, bounds, determinism); both keep greedy speculative decoding equal to greedy on a
// tiny random model, and bad parameters are named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "model/tiny.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tests/support/drafter_rig.h"

using namespace specdec;
using namespace specdec::strategies;

namespace test_strategies_drafters_learned {  // this file's own names (its tests compile in a batch with others)

using Opts = std::map<std::string, std::string>;

using test_support::error_of;
using test_support::P;
using test_support::Rig;

// One verification round as speculative/loop.cpp shows it to the drafter.
void round_trip(Drafter& d, const Tokens& fed, const std::vector<int32_t>& parents, const std::vector<Tokens>& rows,
                int64_t n_valid, const std::vector<int32_t>& accepted) {
  d.observe(Round{n_valid, accepted, TargetRows{fed, parents, rows, {}}});
}

// ---- recycling ---------------------------------------------------------------------------------
TEST(RecyclingDrafter, TableRowsComeFromObservedTopKAndAreOverwritten) {
  Rig rig({{"recycle_shape", "3"}, {"recycle_prompt_bigrams", "false"}});
  auto d = rig.make("recycling");
  EXPECT_FALSE(d->has_distribution());
  EXPECT_EQ(d->target_wants().topk, 8);
  const Tokens seq = {1, 2, 5};
  EXPECT_TRUE(d->propose(seq, 4).tokens.empty());  // nothing seen yet
  round_trip(*d, {5}, {}, {{7, 8, 9, 10}}, 3, {});
  DraftProposal p = d->propose(seq, 4);
  EXPECT_EQ(p.tokens, (Tokens{7, 8, 9}));  // the first 3 of M[5]
  EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, -1, -1}));
  round_trip(*d, {5}, {}, {{11, 12}}, 3, {});  // overwritten, not merged
  EXPECT_EQ(d->propose(seq, 4).tokens, (Tokens{11, 12}));
}

TEST(RecyclingDrafter, BuildsTheStaticShapeBreadthFirst) {
  Rig rig({{"recycle_shape", "2,2,1"}, {"recycle_prompt_bigrams", "false"}});
  auto d = rig.make("recycling");
  d->propose({1}, 3);
  // A chain 1 2 3 fed: M[1] = {2, 3}, M[2] = {3, 4}, M[3] = {4, 1}.
  round_trip(*d, {1, 2, 3}, {}, {{2, 3}, {3, 4}, {4, 1}}, 1, {});
  const DraftProposal p = d->propose({9, 1}, 3);
  // Depth 1: 2, 3. Depth 2: under 2 -> 3, 4; under 3 -> 4, 1. Depth 3 (one child): under 3 -> 4;
  // under 4 nothing (never seen); under 1 -> 2.
  EXPECT_EQ(p.tokens, (Tokens{2, 3, 3, 4, 4, 1, 4, 2}));
  EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, -1, 0, 0, 1, 1, 2, 5}));
  const DraftProposal shallow = d->propose({9, 1}, 2);  // max_depth cuts the shape
  EXPECT_EQ(shallow.tokens, (Tokens{2, 3, 3, 4, 4, 1}));
  for (int64_t i = 0; i < shallow.size(); ++i) EXPECT_LE(shallow.depth(i), 2);
  EXPECT_TRUE(d->propose({9, 1}, 0).tokens.empty());
}

TEST(RecyclingDrafter, TheAcceptedPathsRowWinsForATokenFedTwice) {
  for (int32_t accepted : {0, 1}) {
    Rig rig({{"recycle_shape", "1"}, {"recycle_prompt_bigrams", "false"}});
    auto d = rig.make("recycling");
    d->propose({1}, 2);
    // Root 1 with two children both holding token 9 (rows 1 and 2 of the forward).
    round_trip(*d, {1, 9, 9}, {-1, 0, 0}, {{9}, {5}, {6}}, 2, {accepted});
    EXPECT_EQ(d->propose({1, 9}, 2).tokens, (Tokens{accepted == 0 ? 5 : 6})) << accepted;
  }
  Rig rig({{"recycle_shape", "1"}, {"recycle_prompt_bigrams", "false"}});
  auto d = rig.make("recycling");
  d->propose({1}, 2);
  round_trip(*d, {1, 9, 9}, {-1, 0, 0}, {{3}, {5}, {6}}, 1, {});  // nothing accepted: the latest row
  EXPECT_EQ(d->propose({1, 9}, 2).tokens, (Tokens{6}));
}

TEST(RecyclingDrafter, PromptBigramsSeedTheTableNewestFirst) {
  const Tokens prompt = {1, 2, 1, 3, 1};
  EXPECT_EQ(Rig(Opts{{"recycle_shape", "4"}}).make("recycling")->propose(prompt, 3).tokens, (Tokens{3, 2}));
  EXPECT_EQ(Rig(Opts{{"recycle_shape", "1"}, {"recycle_k", "1"}}).make("recycling")->propose(prompt, 3).tokens,
            (Tokens{3}));
  EXPECT_TRUE(Rig(Opts{{"recycle_prompt_bigrams", "false"}}).make("recycling")->propose(prompt, 3).tokens.empty());
  // Depth 2 through the seeded rows: 1 -> {3, 2}; 3 -> {1}; 2 -> {1}.
  const DraftProposal p = Rig(Opts{{"recycle_shape", "2,1"}}).make("recycling")->propose(prompt, 3);
  EXPECT_EQ(p.tokens, (Tokens{3, 2, 1, 1}));
  EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, -1, 0, 1}));
}

// ---- lookahead ---------------------------------------------------------------------------------
std::map<std::string, std::string> la(int n, int w, int g, bool prompt_ngrams = true) {
  return {{"lookahead_ngram", std::to_string(n)}, {"lookahead_window", std::to_string(w)},
          {"lookahead_verify", std::to_string(g)}, {"lookahead_prompt_ngrams", prompt_ngrams ? "true" : "false"}};
}

TEST(LookaheadDrafter, PromptNgramsFormTheVerificationBranchAndTheWindowAChain) {
  const Tokens prompt = {1, 2, 3, 1, 2, 4, 1};
  Rig rig(la(3, 2, 2));
  auto d = rig.make("lookahead");
  EXPECT_FALSE(d->has_distribution());
  EXPECT_EQ(d->target_wants().topk, 1);
  const DraftProposal p = d->propose(prompt, 4);
  // Pool[1] = {(2, 4), (2, 3)}, newest first, merged into a trie; then the window chain.
  ASSERT_EQ(p.size(), 5);
  EXPECT_EQ(Tokens(p.tokens.begin(), p.tokens.begin() + 3), (Tokens{2, 4, 3}));
  EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, 0, 0, -1, 3}));
  const std::set<TokenId> in_prompt(prompt.begin(), prompt.end());
  EXPECT_TRUE(in_prompt.count(p.tokens[3]) && in_prompt.count(p.tokens[4]));  // random prompt tokens
  // G = 1 keeps the newest candidate; max_depth 1 cuts candidates and window to one token.
  EXPECT_EQ(Rig(la(3, 2, 1)).make("lookahead")->propose(prompt, 4).parents, (std::vector<int32_t>{-1, 0, -1, 2}));
  const DraftProposal cut = Rig(la(3, 2, 2)).make("lookahead")->propose(prompt, 1);
  EXPECT_EQ(cut.parents, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(cut.tokens[0], 2);
  // Without prompt n-grams only the window is proposed.
  EXPECT_EQ(Rig(la(3, 2, 2, false)).make("lookahead")->propose(prompt, 4).parents, (std::vector<int32_t>{-1, 0}));
}

TEST(LookaheadDrafter, TheJacobiIterateBecomesTheNextWindowShiftedByTheCommit) {
  const Tokens prompt = {1, 2, 3};
  for (int64_t committed : {1, 2}) {
    Rig rig(la(3, 3, 0, false));
    auto d = rig.make("lookahead");
    const DraftProposal p = d->propose(prompt, 4);  // window g1 g2 g3 for positions 3, 4, 5
    ASSERT_EQ(p.size(), 3);
    Tokens fed = {3};
    fed.insert(fed.end(), p.tokens.begin(), p.tokens.end());
    // Target top-1: y0 = 10 after the root, y1..y3 = 11, 12, 13 after the guesses: the iterate
    // for positions 3..6.
    const std::vector<int32_t> parents = {-1, 0, 1, 2};
    Tokens seq = prompt;
    seq.push_back(10);
    std::vector<int32_t> accepted;
    if (committed == 2) {  // the first guess happened to be right: accepted, then 11 follows
      accepted = {0};
      fed[1] = 10;
      seq.push_back(11);
    }
    round_trip(*d, fed, parents, {{10}, {11}, {12}, {13}}, static_cast<int64_t>(seq.size()) - 1, accepted);
    const DraftProposal next = d->propose(seq, 4);
    ASSERT_EQ(next.size(), 3);
    if (committed == 1) {
      EXPECT_EQ(next.tokens, (Tokens{11, 12, 13}));  // positions 4, 5, 6
    } else {
      EXPECT_EQ(Tokens(next.tokens.begin(), next.tokens.begin() + 2), (Tokens{12, 13}));  // 5, 6; then a refill
      EXPECT_NE(std::find(prompt.begin(), prompt.end(), next.tokens[2]), prompt.end());
    }
  }
}

TEST(LookaheadDrafter, CollectsNgramsAlongTheDiagonalOfTheTrajectory) {
  const Tokens prompt = {1, 2, 3};
  Rig rig(la(3, 2, 4, false));
  auto d = rig.make("lookahead");
  const DraftProposal p1 = d->propose(prompt, 4);  // G1 = (w1, w2) at positions 3, 4
  ASSERT_EQ(p1.size(), 2);
  const TokenId w1 = p1.tokens[0], w2 = p1.tokens[1];
  round_trip(*d, {3, w1, w2}, {-1, 0, 1}, {{20}, {21}, {22}}, 3, {});  // Y1 = 20 21 22 at 3..5
  Tokens seq = {1, 2, 3, 20};
  const DraftProposal p2 = d->propose(seq, 4);  // G2 = (21, 22) at positions 4, 5
  EXPECT_EQ(p2.tokens, (Tokens{21, 22}));
  round_trip(*d, {20, 21, 22}, {-1, 0, 1}, {{30}, {31}, {32}}, 4, {});  // Y2 = 30 31 32 at 4..6
  // N = 3 diagonals: p = 3: (G1[3], G2[4], Y2[5]) = (w1, 21, 31); p = 4: (w2, 22, 32). Pooled
  // under their first token, newest first.
  seq.push_back(w1);
  const DraftProposal p3 = d->propose(seq, 4);
  ASSERT_GE(p3.size(), 2);
  EXPECT_EQ(Tokens(p3.tokens.begin(), p3.tokens.begin() + 2), w1 == w2 ? (Tokens{22, 32}) : (Tokens{21, 31}));
  EXPECT_EQ(std::vector<int32_t>(p3.parents.begin(), p3.parents.begin() + 2), (std::vector<int32_t>{-1, 0}));
  std::map<std::string, double> stats;
  d->report(stats);
  EXPECT_EQ(stats["lookahead_ngrams_from_window"], 2);
}

TEST(LookaheadDrafter, ProposalsStayWithinTheNodeAndDepthBounds) {
  Rig rig(la(5, 7, 6));
  auto d = rig.make("lookahead");
  Tokens seq;
  for (int i = 0; i < 300; ++i) seq.push_back(static_cast<TokenId>((i * 7) % 5));  // many repeated 5-grams
  Rng rng(3);
  for (int64_t depth : {1, 2, 3, 4, 8}) {
    const DraftProposal p = d->propose(seq, depth);
    EXPECT_LE(p.size(), 7 + 6 * 4);
    for (int64_t i = 0; i < p.size(); ++i) {
      ASSERT_TRUE(p.parents[i] >= -1 && p.parents[i] < i);
      EXPECT_LE(p.depth(i), depth);
    }
    Tokens fed = {seq.back()};
    fed.insert(fed.end(), p.tokens.begin(), p.tokens.end());
    std::vector<Tokens> rows;
    for (size_t r = 0; r < fed.size(); ++r) rows.push_back({static_cast<TokenId>(rng.next() % 5)});
    std::vector<int32_t> parents = {-1};
    for (int32_t q : p.parents) parents.push_back(q + 1);
    round_trip(*d, fed, parents, rows, static_cast<int64_t>(seq.size()), {});
    seq.push_back(rows[0][0]);
  }
}

// ---- both, through the strategy ----------------------------------------------------------------
std::shared_ptr<model::CausalLM> tiny() {
  static auto m = model::make_tiny_llama(model::tiny_llama_config(), 11);
  return m;
}

Request tiny_request(Tokens prompt, int64_t n_new) {
  Request req;
  req.prompt = std::move(prompt);
  req.target = tiny();
  req.stop.max_new_tokens = n_new;
  return req;
}

TEST(LearnedDrafters, GreedySpeculativeEqualsGreedyOnATinyModel) {
  const std::vector<std::map<std::string, std::string>> cases = {
      {{"drafter", "recycling"}},
      {{"drafter", "recycling"}, {"recycle_shape", "2,2,2,2,2"}, {"recycle_k", "3"}, {"gamma", "5"}},
      {{"drafter", "recycling"}, {"recycle_prompt_bigrams", "false"}},
      {{"drafter", "lookahead"}},
      {{"drafter", "lookahead"}, {"lookahead_ngram", "2"}, {"lookahead_window", "6"}, {"gamma", "6"}},
      {{"drafter", "lookahead"}, {"lookahead_verify", "0"}, {"lookahead_prompt_ngrams", "false"}},
  };
  for (const Tokens& prompt : {Tokens{1, 5, 9, 5, 9, 3, 1, 5, 9}, Tokens{4, 8, 15, 16, 23, 4, 8}}) {
    const Request req = tiny_request(prompt, 48);
    const Result base = create("greedy", {})->generate(req, {});
    ASSERT_EQ(base.tokens.size(), 48u);
    for (auto params : cases) {
      params["temperature"] = "0";
      std::string name;
      for (const auto& [k, v] : params) name += k + "=" + v + " ";
      const Result spec = create("speculative", P(params))->generate(req, {});
      EXPECT_EQ(spec.tokens, base.tokens) << name;
      EXPECT_GT(spec.stats.n_drafted, 0) << name;
      EXPECT_GT(spec.stats.n_accepted, 0) << name;  // both learn the tiny model's loops quickly
    }
  }
}

TEST(LearnedDrafters, SeededRunsAreReproducible) {
  for (const char* drafter : {"recycling", "lookahead"}) {
    for (const char* temperature : {"0", "0.8"}) {
      const auto strategy = create("speculative", P({{"drafter", drafter}, {"temperature", temperature}}));
      Request req = tiny_request({1, 5, 9, 5, 9, 3}, 32);
      req.seed = 17;
      const Result a = strategy->generate(req, {});
      const Result b = strategy->generate(req, {});
      EXPECT_EQ(a.tokens, b.tokens) << drafter << " T=" << temperature;
      EXPECT_EQ(a.stats.n_drafted, b.stats.n_drafted) << drafter << " T=" << temperature;
      EXPECT_EQ(a.stats.n_accepted, b.stats.n_accepted) << drafter << " T=" << temperature;
      EXPECT_EQ(a.stats.drafter_stats, b.stats.drafter_stats) << drafter << " T=" << temperature;
    }
  }
}

TEST(LearnedDrafters, BadParametersAreNamedErrorsWithTheirRanges) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"recycle_k", "0"}}, "recycle_k must be in [1, 8], got 0"},
      {{{"recycle_k", "64"}}, "recycle_k must be in [1, 8], got 64"},
      {{{"recycle_shape", "4,x"}}, "recycle_shape = '4,x': entry 'x' must be an integer in [1, 8]"},
      {{{"recycle_shape", "4,9"}}, "entry '9' must be an integer in [1, 8]"},
      {{{"recycle_shape", "3"}, {"recycle_k", "2"}}, "entry '3' must be an integer in [1, 2]"},
      {{{"recycle_shape", ""}}, "recycle_shape = '' is empty"},
      {{{"recycle_shape", "8,8,8"}}, "makes 584 nodes, more than the limit of 256"},
      {{{"lookahead_ngram", "1"}}, "lookahead_ngram must be in [2, 16], got 1"},
      {{{"lookahead_window", "0"}}, "lookahead_window must be in [1, 64], got 0"},
      {{{"lookahead_verify", "-1"}}, "lookahead_verify must be in [0, 64], got -1"},
      {{{"lookahead_pool", "0"}}, "lookahead_pool must be in [1, 1024], got 0"},
      {{{"lookahead_ngram", "16"}, {"lookahead_verify", "64"}}, "= 964 nodes, more than the limit of 256"},
  };
  for (const auto& c : cases) {  // no structured binding: clang 14 cannot capture one
    const std::string msg = error_of([&] { create("speculative", P(c.first)); });
    EXPECT_NE(msg.find(c.second), std::string::npos) << msg;
  }
}

}  // namespace test_strategies_drafters_learned
