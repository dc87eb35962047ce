// Structured output's masked drafts (issue 57, item 4; speculative/drafters/model.cpp, draft_mask):
// the draft-model drafter masks its own rows with the grammar after its own draft path, on a tiny
// Llama with a byte-level tokenizer (tests/support/tiny_gguf.h), in about a second.
//  - At temperature 0 speculative decoding equals constrained greedy token for token with the
//    drafter's rows masked and unmasked (chains, block verification, a batch of two). The target
//    is its own draft model, so a masked drafter proposes the masked target's argmax and has
//    nothing rejected but what follows an end, while an unmasked one proposes tokens the grammar
//    refuses and has them rejected.
//  - At temperature > 0 each proposal's q row is the masked law: no mass on a token the grammar
//    refuses after that row's path (an independent matcher's mask, as the loop asks it for the
//    target's rows), rows summing to 1, each drafted token admitted with q > 0.
//
// Planted bugs (temporary changes to model.cpp, 2026-12-02): q taken from the unmasked row while
// the token is drawn from the masked one: QIsTheMaskedLawItDrewFrom fails (q mass on refused
// tokens; the T = 0 test cannot see it, greedy reads no q). The draw unmasked while q is masked:
// QIsTheMaskedLawItDrewFrom fails (drafted tokens refused, q 0 on them) and the T = 0 test too (a
// rejection where a masked drafter has none). Each row masked after the sequence only (the draft
// so far left out of the path): both tests fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>

#include "model/causal_lm.h"
#include "sampling/grammar.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tests/support/grammar_tiny.h"
#include "tokenizer/tokenizer.h"

using namespace specdec;
using namespace specdec::strategies;
namespace grammar_tiny = specdec::testing_support::grammar_tiny;

namespace {

using grammar_tiny::kSchema;
using grammar_tiny::params;
using grammar_tiny::request;

TEST(GrammarDraftsTiny, MaskedDraftsEqualConstrainedGreedyAndAreAccepted) {
  const std::vector<std::map<std::string, std::string>> setups = {
      {{"drafter", "model"}, {"gamma", "3"}},
      {{"drafter", "model"}, {"gamma", "3"}, {"verify", "block"}},
      {{"drafter", "model"}, {"gamma", "4"}, {"forced_tokens", "false"}},
  };
  for (const std::string& prompt : {"A person: ", "JSON please"}) {
    const Request req = request(prompt);
    const Result base = create("greedy", params())->generate(req, {});
    ASSERT_GT(base.tokens.size(), 20u) << base.text;
    for (const auto& setup : setups) {
      std::string what = "gamma " + setup.at("gamma");
      for (const char* k : {"verify", "forced_tokens"})
        if (setup.count(k)) what += std::string(" ") + k + "=" + setup.at(k);
      auto off = setup;
      off["draft_mask"] = "false";
      const Result masked = create("speculative", params(setup))->generate(req, {});
      const Result plain = create("speculative", params(off))->generate(req, {});
      EXPECT_EQ(masked.tokens, base.tokens) << what << "\n-- greedy: " << base.text << "\n-- spec: " << masked.text;
      EXPECT_EQ(masked.finish, base.finish) << what;
      EXPECT_EQ(plain.tokens, base.tokens) << what << " draft_mask=false";
      const int64_t rejected = masked.stats.n_drafted - masked.stats.n_accepted;
      const int64_t rejected_plain = plain.stats.n_drafted - plain.stats.n_accepted;
      std::printf("  %-32s %-12s masked: %lld of %lld drafted accepted, %lld rounds; unmasked: %lld of %lld, %lld rounds\n",
                  what.c_str(), prompt.c_str(), (long long)masked.stats.n_accepted, (long long)masked.stats.n_drafted,
                  (long long)masked.stats.n_rounds, (long long)plain.stats.n_accepted,
                  (long long)plain.stats.n_drafted, (long long)plain.stats.n_rounds);
      // The drafter is the target: masked, it drafts the masked target's argmax, and only the
      // last round's tokens after the end can be rejected (at most gamma).
      EXPECT_LE(rejected, std::stoll(setup.at("gamma"))) << what;
      EXPECT_GT(rejected_plain, rejected) << what << ": the unmasked drafter had no more rejected than the masked";
      EXPECT_LT(masked.stats.n_rounds, plain.stats.n_rounds) << what;
    }
  }
}

// A batch (the model drafter's shared cache, a matcher per slot): each sequence is its own
// constrained greedy run, and a masked drafter has nothing rejected but after an end.
TEST(GrammarDraftsTiny, BatchesMaskEachSlotsRows) {
  std::vector<Request> reqs = {request("A person: "), request("JSON please"), request("x")};
  const std::vector<Result> batch =
      create("speculative", params({{"drafter", "model"}, {"gamma", "3"}, {"forced_tokens", "false"}}))
          ->generate_batch(reqs, BatchOptions{2, 0}, {});
  ASSERT_EQ(batch.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result alone = create("greedy", params())->generate(reqs[i], {});
    EXPECT_EQ(batch[i].tokens, alone.tokens) << "request " << i;
    EXPECT_LE(batch[i].stats.n_drafted - batch[i].stats.n_accepted, 3) << "request " << i;
  }
}

// At temperature > 0 every q row is the masked law it drew from: the drafter built through the
// registry, as the loop builds it, proposing after prefixes of a constrained output.
// With draft_lead (the default) the chains also hold the grammar's forced tokens after draws,
// each with a one-hot q row on its token, so they are longer than the 4 draws.
TEST(GrammarDraftsTiny, QIsTheMaskedLawItDrewFrom) {
  EXPECT_GT(grammar_tiny::check_q_is_the_masked_law("model", {{"draft_lead", "false"}}, 4, 4, /*exact_n=*/4), 40);
  EXPECT_GT(grammar_tiny::check_q_is_the_masked_law("model", {}, 4, 4), 40);
}

// draft_lead: where a masked chain reaches the grammar's forced tokens they join it without a
// draft forward. At T = 0 the tokens are constrained greedy's with it on and off (alone, in
// both verify modes, and in a batch of two), and on it takes lead tokens and spends fewer draft
// forwards for the same draws.
TEST(GrammarDraftsTiny, TheGrammarsLeadAlongTheChainCostsNoDraftForward) {
  for (const std::string& prompt : {"A person: ", "JSON please"}) {
    const Request req = request(prompt);
    const Result base = create("greedy", params())->generate(req, {});
    for (const char* verify : {"tokenwise", "block"}) {
      std::map<std::string, std::string> setup = {{"drafter", "model"}, {"gamma", "3"}, {"verify", verify}};
      auto off = setup;
      off["draft_lead"] = "false";
      const Result on = create("speculative", params(setup))->generate(req, {});
      const Result plain = create("speculative", params(off))->generate(req, {});
      EXPECT_EQ(on.tokens, base.tokens) << verify << "\n-- greedy: " << base.text << "\n-- spec: " << on.text;
      EXPECT_EQ(plain.tokens, base.tokens) << verify << " draft_lead=false";
      const auto it = on.stats.drafter_stats.find("draft_lead_tokens");
      const double lead = it != on.stats.drafter_stats.end() ? it->second : -1;
      EXPECT_GT(lead, 0) << verify;
      EXPECT_EQ(plain.stats.drafter_stats.count("draft_lead_tokens"), 0u) << verify;
      EXPECT_LT(on.stats.n_draft_forwards, plain.stats.n_draft_forwards) << verify;
      std::printf("  %-10s %-12s draft_lead: %lld forwards, %lld rounds, %.0f lead tokens; "
                  "off: %lld forwards, %lld rounds\n",
                  verify, prompt.c_str(), (long long)on.stats.n_draft_forwards, (long long)on.stats.n_rounds, lead,
                  (long long)plain.stats.n_draft_forwards, (long long)plain.stats.n_rounds);
    }
  }
  std::vector<Request> reqs = {request("A person: "), request("JSON please"), request("x")};
  const auto spec = create("speculative", params({{"drafter", "model"}, {"gamma", "3"}}));
  const std::vector<Result> batch = spec->generate_batch(reqs, BatchOptions{2, 0}, {});
  ASSERT_EQ(batch.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result alone = spec->generate(reqs[i], {});
    EXPECT_EQ(batch[i].tokens, alone.tokens) << "request " << i;
    EXPECT_EQ(batch[i].stats.n_draft_forwards, alone.stats.n_draft_forwards) << "request " << i;
  }
}

}  // namespace
