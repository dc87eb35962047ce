// speculative's synthetic_acceptance (benchmarking the loop; never the default): each draft
// node is accepted with probability alpha instead of being verified. Checked on tiny models and
// on hand-built trees: the acceptance law (per position for chains, Leviathan's expected tokens
// per round; children in order for trees, the exact expected path length), the exact ends
// (alpha 0: nothing accepted; alpha 1 with the target drafting for itself: greedy's tokens),
// the label in the stats, and the named errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "strategies/registry.h"
#include "speculative/proposer.h"
#include "speculative/verifier.h"
#include "tests/support/drafter_rig.h"

using namespace specdec;
using namespace specdec::strategies;

namespace {

using test_support::tiny;

Request tiny_request(int64_t max_new) {
  Request r;
  r.prompt = {1, 5, 9, 5, 9, 3};
  r.target = tiny(11);
  r.draft = tiny(12);  // a different random model: real verification would reject most drafts
  r.stop.max_new_tokens = max_new;
  return r;
}

Params spec(const std::string& alpha, const std::string& gamma = "4") {
  return Params({{"temperature", "0"}, {"drafter", "model"}, {"gamma", gamma}, {"synthetic_acceptance", alpha}});
}

// Tokens per chain round when each of gamma positions is accepted with probability a in turn:
// n accepted with probability a^n (1 - a) for n < gamma, a^gamma for n = gamma; tokens n + 1.
// Returns {mean, variance}; the mean is Leviathan et al.'s (1 - a^(gamma+1)) / (1 - a).
std::pair<double, double> chain_tokens_law(double a, int gamma) {
  double m = 0, m2 = 0;
  for (int n = 0; n <= gamma; ++n) {
    const double pr = n < gamma ? std::pow(a, n) * (1 - a) : std::pow(a, gamma);
    m += pr * (n + 1);
    m2 += pr * (n + 1) * (n + 1);
  }
  return {m, m2 - m * m};
}

TEST(SyntheticAcceptance, ChainsAcceptEachPositionWithAlpha) {
  const double a = 0.6;
  // Four generations of 240 tokens (the tiny model's context is 256), their counts summed.
  Stats s;
  s.accepted_per_position.assign(8, 0);
  s.drafted_per_position.assign(8, 0);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Request req = tiny_request(240);
    req.seed = seed;
    const Stats r = create("speculative", spec("0.6"))->generate(req, {}).stats;
    EXPECT_EQ(r.synthetic_acceptance, std::vector<double>{a});
    s.n_rounds += r.n_rounds;
    s.n_generated += r.n_generated;
    for (size_t i = 0; i < 8; ++i) {
      s.accepted_per_position[i] += r.accepted_per_position[i];
      s.drafted_per_position[i] += r.drafted_per_position[i];
    }
  }
  ASSERT_GT(s.n_rounds, 300);
  // Position 0 is drafted every round; it is accepted with probability a (binomial, 4 sigma).
  const double p0 = double(s.accepted_per_position[0]) / double(s.drafted_per_position[0]);
  EXPECT_NEAR(p0, a, 4 * std::sqrt(a * (1 - a) / double(s.drafted_per_position[0])));
  // Position i given position i-1 accepted: a again.
  const double p1 = double(s.accepted_per_position[1]) / double(s.accepted_per_position[0]);
  EXPECT_NEAR(p1, a, 4 * std::sqrt(a * (1 - a) / double(s.accepted_per_position[0])));
  // Tokens per round against Leviathan's expectation (4 sigma; the last rounds draft fewer than
  // gamma tokens, a bias of at most a few rounds in n_rounds: 0.02 allowed for it).
  const auto [mean, var] = chain_tokens_law(a, 4);
  EXPECT_NEAR(s.tau(), mean, 4 * std::sqrt(var / double(s.n_rounds)) + 0.02)
      << "tau " << s.tau() << " vs (1 - a^5) / (1 - a) = " << mean;
}

TEST(SyntheticAcceptance, ZeroAcceptsNothingAndOneWithTheTargetDraftingGivesGreedy) {
  const Result none = create("speculative", spec("0"))->generate(tiny_request(40), {});
  EXPECT_EQ(none.stats.n_accepted, 0);
  EXPECT_DOUBLE_EQ(none.stats.tau(), 1.0);
  Request req = tiny_request(40);
  const Result greedy = create("greedy", Params())->generate(req, {});
  req.draft = req.target;  // the target drafts for itself: its drafts are greedy's tokens
  const Result all = create("speculative", spec("1"))->generate(req, {});
  EXPECT_DOUBLE_EQ(all.stats.alpha(), 1.0);
  EXPECT_EQ(all.tokens, greedy.tokens);
}

// A hand-built tree: node 0 and 1 are the root's children, 2 and 3 node 0's, 4 node 2's.
DraftProposal small_tree() {
  DraftProposal d;
  d.tokens = {10, 11, 12, 13, 14};
  d.parents = {-1, -1, 0, 0, 2};
  return d;
}

std::vector<Tokens> best_rows() {  // row i: the target's likeliest token after node i - 1
  std::vector<Tokens> rows;
  for (TokenId t = 100; t < 106; ++t) rows.push_back({t});
  return rows;
}

TEST(SyntheticAcceptance, TreesTakeTheFirstAcceptedChildInOrder) {
  const DraftProposal d = small_tree();
  Rng rng(3);
  const Verdict all = synthetic_verdict(d, best_rows(), {1.0}, rng);
  EXPECT_EQ(all.path, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(all.emitted, (Tokens{10, 12, 14, 105}));
  const Verdict none = synthetic_verdict(d, best_rows(), {0.0}, rng);
  EXPECT_TRUE(none.path.empty());
  EXPECT_EQ(none.emitted, (Tokens{100}));
  // alpha 0.5: P(node accepted) = 0.5 (0), 0.25 (1), 0.25 (2), 0.125 (3), 0.125 (4); the
  // expected path length is their sum, 1.25. 20,000 draws: 4 sigma of each.
  const int n = 20000;
  std::vector<int> hits(5, 0);
  double length = 0;
  for (int i = 0; i < n; ++i) {
    const Verdict v = synthetic_verdict(d, best_rows(), {0.5}, rng);
    for (int32_t node : v.path) ++hits[node];
    length += double(v.path.size());
    ASSERT_EQ(v.emitted.back(), 100 + (v.path.empty() ? 0 : v.path.back() + 1));
  }
  const double expect[] = {0.5, 0.25, 0.25, 0.125, 0.125};
  for (int k = 0; k < 5; ++k)
    EXPECT_NEAR(hits[k] / double(n), expect[k], 4 * std::sqrt(expect[k] * (1 - expect[k]) / n)) << "node " << k;
  EXPECT_NEAR(length / n, 1.25, 0.03);  // the path length's sd is below 1: 4 sigma < 0.03
}

// By child rank (Sequoia's positional model): a node's i-th child tried is accepted with
// ranks[i], the last value for later children.
TEST(SyntheticAcceptance, TreesTakeEachChildWithItsRanksProbability) {
  const DraftProposal d = small_tree();
  Rng rng(5);
  // {0, 1}: every first child is rejected and every second one accepted: node 1 (the root's
  // second child), which has no children.
  const Verdict second = synthetic_verdict(d, best_rows(), {0.0, 1.0}, rng);
  EXPECT_EQ(second.path, (std::vector<int32_t>{1}));
  EXPECT_EQ(second.emitted, (Tokens{11, 102}));
  // {0.5, 0.2}: P(node accepted) = 0.5 (0), 0.5 * 0.2 (1), 0.5 * 0.5 (2: node 0's first child),
  // 0.5 * 0.5 * 0.2 (3: its second), 0.25 * 0.5 (4: node 2's first); the expected path length is
  // their sum, 1.025. 20,000 draws: 4 sigma of each. One alpha for all ranks (0.5) gives 0.25 for
  // node 1 and node 3 and fails.
  const int n = 20000;
  std::vector<int> hits(5, 0);
  double length = 0;
  for (int i = 0; i < n; ++i) {
    const Verdict v = synthetic_verdict(d, best_rows(), {0.5, 0.2}, rng);
    for (int32_t node : v.path) ++hits[node];
    length += double(v.path.size());
  }
  const double expect[] = {0.5, 0.1, 0.25, 0.05, 0.125};
  for (int k = 0; k < 5; ++k)
    EXPECT_NEAR(hits[k] / double(n), expect[k], 4 * std::sqrt(expect[k] * (1 - expect[k]) / n)) << "node " << k;
  EXPECT_NEAR(length / n, 1.025, 0.03);
  // Through the strategy: a chain uses the first rank only, and the stats carry all of them.
  Request req = tiny_request(40);
  req.draft = req.target;
  const Result r = create("speculative", spec("1,0"))->generate(req, {});
  EXPECT_EQ(r.stats.synthetic_acceptance, (std::vector<double>{1.0, 0.0}));
  EXPECT_DOUBLE_EQ(r.stats.alpha(), 1.0);
}

TEST(SyntheticAcceptance, BadValuesAndBatchesAreNamedErrors) {
  for (const char* bad : {"1.5", "-0.1", "often", "0.8,", "0.8,1.2", ",0.5", "0.5;0.2"}) {
    try {
      create("speculative", spec(bad));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("synthetic_acceptance"), std::string::npos) << e.what();
    }
  }
  const auto s = create("speculative", spec("0.5"));
  try {
    s->generate_batch({tiny_request(8), tiny_request(8)}, BatchOptions{}, {});
    ADD_FAILURE() << "a batch ran with synthetic acceptance";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_size 1"), std::string::npos) << e.what();
  }
  // Off by default: the strategy verifies (the stats carry no label).
  const Result r = create("speculative", Params({{"temperature", "0"}, {"drafter", "model"}}))->generate(tiny_request(8), {});
  EXPECT_TRUE(r.stats.synthetic_acceptance.empty());
}

}  // namespace
