// Every built-in drafter drafts inside the grammar (issue 57, item 4; speculative's draft_mask,
// on by default), reached through the strategy registry as a user reaches it, on the tiny
// structured-output target (tests/support/grammar_tiny.h: its own draft model) with fresh
// (untrained) EAGLE and Medusa heads:
//  - the heads that draw from logits (tree, eagle, medusa; chains and trees) mask each row after
//    its path (ConstraintState::mask_draft); the lookup drafters (ngram, suffix, recycling,
//    lookahead) cut their proposals with the one shared helper (keep_admitted).
//  - At temperature 0 the output equals constrained greedy token for token, masked or not.
//  - Masked, no draft token is refused by the grammar (Stats::n_refused, counted where the
//    target's rows are masked: a token its parent's masked row gives probability 0); with
//    draft_mask=false the drafter drafts as before and has tokens refused, which shows that the
//    count sees a drafter that skips the mask. At temperature 1 the same holds for the drafters
//    that draw (a draw from the masked q is never refused).
//
//  - A sampled static tree's q rows put no mass on refused tokens (TreeQIsTheMaskedLawItDrewFrom).
//
// Planted bugs (2026-12-02, not committed): TreeDrafter::take() without its mask_rows() call (the
// root still masked) passes the T = 0 checks, since the tree's end cuts refused nodes anyway
// (they cost acceptance only), and fails TreeQIsTheMaskedLawItDrewFrom (q mass on refused
// tokens: a sampled tree verified with it would be biased); keep_admitted made a no-op fails
// EveryDrafterDraftsInsideTheGrammar for every lookup drafter.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "model/draft_heads.h"
#include "sampling/grammar.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tests/support/command.h"
#include "tests/support/grammar_tiny.h"

using namespace specdec;
using namespace specdec::strategies;
namespace grammar_tiny = specdec::testing_support::grammar_tiny;
using Cell = std::map<std::string, std::string>;

namespace {

// Fresh heads for the tiny target, written once per test program.
const std::string& heads_dir() {
  static const testing_support::ProcessDir dir("specdec_grammar_drafter_heads");
  static const std::string path = [] {
    const model::CausalLM& target = *grammar_tiny::target().model;
    model::DraftHead::fresh(target, "eagle", "tiny", 1).save((dir.path / "eagle").string());
    model::DraftHead::fresh(target, "medusa", "tiny", 1, 0, 3).save((dir.path / "medusa").string());
    return dir.path.string();
  }();
  return path;
}

std::string name_of(const Cell& s) {
  std::string out;
  for (const auto& [k, v] : s)
    if (k != "eagle_head" && k != "medusa_head") out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

std::vector<Cell> setups() {
  const std::string eagle = heads_dir() + "/eagle", medusa = heads_dir() + "/medusa";
  return {
      {{"drafter", "ngram"}},
      {{"drafter", "suffix"}, {"suffix_tree_width", "3"}},
      {{"drafter", "recycling"}, {"recycle_shape", "3,2,1"}},
      {{"drafter", "lookahead"}},
      {{"drafter", "tree"}, {"tree_branching", "3,2,1"}},
      {{"drafter", "tree"}, {"tree_budget", "6"}, {"tree_topk", "3"}},
      {{"drafter", "tree"}, {"tree_budget", "auto"}, {"tree_topk", "3"}},
      {{"drafter", "eagle"}, {"eagle_head", eagle}},
      {{"drafter", "eagle"}, {"eagle_head", eagle}, {"eagle_shape", "tree"}, {"tree_branching", "3,2,1"}},
      {{"drafter", "eagle"}, {"eagle_head", eagle}, {"eagle_shape", "tree"}, {"tree_budget", "6"}, {"tree_topk", "3"}},
      {{"drafter", "medusa"}, {"medusa_head", medusa}},
      {{"drafter", "medusa"}, {"medusa_head", medusa}, {"medusa_shape", "tree"}, {"tree_branching", "3,2,1"}},
  };
}

TEST(GrammarDraftersTiny, EveryDrafterDraftsInsideTheGrammar) {
  const std::vector<std::string> prompts = {"A person: ", "JSON please"};
  std::vector<Result> greedy;
  for (const std::string& prompt : prompts) greedy.push_back(create("greedy", grammar_tiny::params())->generate(grammar_tiny::request(prompt), {}));
  for (const Cell& setup : setups()) {
    const std::string what = name_of(setup);
    int64_t refused_plain = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Request req = grammar_tiny::request(prompts[i]);
      Cell off = setup;
      off["draft_mask"] = "false";
      const Result masked = create("speculative", grammar_tiny::params(setup))->generate(req, {});
      const Result plain = create("speculative", grammar_tiny::params(off))->generate(req, {});
      EXPECT_EQ(masked.tokens, greedy[i].tokens) << what << "\n-- greedy: " << greedy[i].text << "\n-- spec: " << masked.text;
      EXPECT_EQ(plain.tokens, greedy[i].tokens) << what << " draft_mask=false";
      EXPECT_EQ(masked.stats.n_refused, 0) << what << ": draft tokens the grammar refuses, with draft_mask on";
      EXPECT_GT(masked.stats.n_drafted, masked.stats.n_forced) << what << ": the drafter drafted nothing";
      refused_plain += plain.stats.n_refused;
      std::printf("  %-58s masked: %3lld of %3lld drafted accepted, %2lld rounds, %lld refused; "
                  "unmasked: %3lld of %3lld, %2lld rounds, %3lld refused\n",
                  what.c_str(), (long long)masked.stats.n_accepted, (long long)masked.stats.n_drafted,
                  (long long)masked.stats.n_rounds, (long long)masked.stats.n_refused,
                  (long long)plain.stats.n_accepted, (long long)plain.stats.n_drafted,
                  (long long)plain.stats.n_rounds, (long long)plain.stats.n_refused);
    }
    // The count sees a drafter that ignores the grammar: this one, unmasked.
    EXPECT_GT(refused_plain, 0) << what << " draft_mask=false: nothing refused, so the check above sees nothing";
  }
}

// At temperature 1 the drafters that draw (a chain's q, a static tree's sampled children) draw
// from the masked law: nothing refused; unmasked, they draw refused tokens.
TEST(GrammarDraftersTiny, DrawsFromTheMaskedLawAreNeverRefused) {
  const std::string eagle = heads_dir() + "/eagle", medusa = heads_dir() + "/medusa";
  const std::vector<Cell> drawing = {
      {{"drafter", "tree"}, {"tree_branching", "3,2,1"}},
      {{"drafter", "eagle"}, {"eagle_head", eagle}},
      {{"drafter", "medusa"}, {"medusa_head", medusa}, {"medusa_shape", "tree"}, {"tree_branching", "2,2"}},
  };
  for (Cell setup : drawing) {
    setup["temperature"] = "1";
    Cell off = setup;
    off["draft_mask"] = "false";
    Request req = grammar_tiny::request("A person: ");
    req.seed = 3;
    const Result masked = create("speculative", grammar_tiny::params(setup))->generate(req, {});
    const Result plain = create("speculative", grammar_tiny::params(off))->generate(req, {});
    EXPECT_EQ(masked.stats.n_refused, 0) << name_of(setup);
    EXPECT_GT(plain.stats.n_refused, 0) << name_of(setup) << " draft_mask=false";
  }
}

// A sampled static tree's q rows are the masked laws its nodes were drawn from: no mass on a
// token the grammar refuses after the node's parent's path (an independent matcher's mask, as the
// loop asks it for the target's rows), each drawn token admitted. The tree drafter built through
// the registry, proposing after prefixes of a constrained output. (Its end cuts nodes off the
// grammar too, keep_admitted, so an unmasked row shows in q, not in what it proposes.)
TEST(GrammarDraftersTiny, TreeQIsTheMaskedLawItDrewFrom) {
  EXPECT_GT(grammar_tiny::check_q_is_the_masked_law("tree", {{"tree_branching", "3,2,1"}}, 4, 1), 40);
}

// A batch of two (the tree drafter's lockstep growth, EAGLE's batched chains): each slot masks
// its own rows and is its own constrained greedy run.
TEST(GrammarDraftersTiny, BatchesMaskEachSlotsRows) {
  std::vector<Request> reqs = {grammar_tiny::request("A person: "), grammar_tiny::request("JSON please")};
  for (const Cell& setup : {Cell{{"drafter", "tree"}, {"tree_budget", "6"}, {"tree_topk", "3"}},
                             Cell{{"drafter", "eagle"}, {"eagle_head", heads_dir() + "/eagle"}}}) {
    const std::vector<Result> batch =
        create("speculative", grammar_tiny::params(setup))->generate_batch(reqs, BatchOptions{2, 0}, {});
    ASSERT_EQ(batch.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Result alone = create("greedy", grammar_tiny::params())->generate(reqs[i], {});
      EXPECT_EQ(batch[i].tokens, alone.tokens) << name_of(setup) << " request " << i;
      EXPECT_EQ(batch[i].stats.n_refused, 0) << name_of(setup) << " request " << i;
    }
  }
}

}  // namespace
