// Structured output's forced tokens (issue 57, item 5; speculative/proposer.h: prepend_forced)
// on a tiny Llama with a byte-level tokenizer (tests/support/tiny_gguf.h), in about a second:
// a JSON schema whose keys, quotes, colons and braces are forced byte by byte. At temperature 0
// speculative decoding with forced drafting on equals constrained greedy token for token, with
// every kind of drafter the round prepends them to (none with q: ngram; with q: the draft model;
// a tree: the tree drafter), both verify modes and a batch of two; the forced share is large;
// with forced_tokens=false nothing is forced and the tokens are the same. A forced token the
// target rejects would be a named error of the loop (speculative/loop.cpp: close), which every
// run here would raise. GrammarForcedLaw: the law at temperature > 0, exactly, in every verify
// mode (tests/support/grammar_law.h: the exact enumeration of test_sampling_grammar.cpp with a
// round that drafts the forced token first, through the real prepend_forced).
//
// Planted bugs (temporary changes, 2026-12-02): forced() forcing an admitted token where two are
// admitted: SamplingGrammar.ForcedTokens and both GrammarForcedTiny runs fail (the loop names a
// rejected forced token). The forced q rows appended after the drafter's instead of before:
// GrammarForcedLaw fails (TV 0.27) and the tiny runs too. A tree's roots left at the root
// instead of below the last forced token: only the direct prepend_forced test fails (the forced
// child is tried first and always accepted, so the law holds and the tokens are greedy's).
// Uniform q rows on the forced tokens: nothing fails, and nothing can: the masked target is
// one-hot there, so min(1, p/q) = 1 for any q > 0 and no residual is ever drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "model/causal_lm.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tests/support/grammar_law.h"
#include "tests/support/grammar_tiny.h"
#include "tests/support/tiny_gguf.h"
#include "tokenizer/tokenizer.h"

using namespace specdec;
using namespace specdec::strategies;
namespace grammar_tiny = specdec::testing_support::grammar_tiny;

namespace test_strategies_grammar_forced_tiny {  // this file's own names (its tests compile in a batch with others)

// The target (tests/support/grammar_tiny.h) is its own draft model:
// every token the drafter drafts after the forced ones is then the target's, and accepted at
// T = 0, so a draft misplaced behind them (a tree's roots not below the last forced token)
// shows as no accepted drafter token.
using grammar_tiny::request;

// The drafter's own rows unmasked (draft_mask=false): the target, its own draft, would otherwise
// draft the skeleton itself in rounds that begin elsewhere (test_strategies_grammar_drafts_tiny),
// and the forced share this file measures would shrink.
Params params(std::map<std::string, std::string> extra = {}) {
  if (extra.count("drafter")) extra["draft_mask"] = "false";  // speculative's parameter
  return grammar_tiny::params(extra);
}

// Every kind of drafter the round prepends its tokens to (none with q: ngram; with q: the draft
// model, in both verify modes; a tree: the tree drafter).
const std::vector<std::map<std::string, std::string>> kSetups = {
    {{"drafter", "ngram"}},
    {{"drafter", "model"}, {"gamma", "3"}},
    {{"drafter", "model"}, {"gamma", "3"}, {"verify", "block"}},
    {{"drafter", "tree"}, {"tree_branching", "2,1"}},
};

TEST(GrammarForcedTiny, SpeculativeWithForcedTokensEqualsConstrainedGreedy) {
  for (const std::string& prompt : {"A person: ", "JSON please"}) {
    const Request req = request(prompt);
    const Result base = create("greedy", params())->generate(req, {});
    ASSERT_GT(base.tokens.size(), 20u) << base.text;
    for (const auto& setup : kSetups) {
      const Result spec = create("speculative", params(setup))->generate(req, {});
      const std::string what = setup.at("drafter") + (setup.count("verify") ? " verify=block" : "");
      EXPECT_EQ(spec.tokens, base.tokens) << what << "\n-- greedy: " << base.text << "\n-- spec: " << spec.text;
      EXPECT_EQ(spec.finish, base.finish) << what;
      // Keys, quotes, colons, commas and braces: far more than a third of this output.
      EXPECT_GT(3 * spec.stats.n_forced, spec.stats.n_generated) << what << ": " << spec.stats.n_forced << " of "
                                                                 << spec.stats.n_generated << " forced";
      // The drafter's own tokens, after the forced ones (as its sequence and its tree's roots say),
      // are accepted too.
      EXPECT_GT(spec.stats.n_accepted - spec.stats.n_forced, 0) << what;
      std::printf("  %-22s %-12s forced %lld of %lld tokens, tau %.2f: %s\n", what.c_str(), prompt.c_str(),
                  (long long)spec.stats.n_forced, (long long)spec.stats.n_generated, spec.stats.tau(),
                  spec.text.c_str());
      auto off = setup;
      off["forced_tokens"] = "false";
      const Result plain = create("speculative", params(off))->generate(req, {});
      EXPECT_EQ(plain.tokens, base.tokens) << what << " forced_tokens=false";
      EXPECT_EQ(plain.stats.n_forced, 0) << what;
      EXPECT_LT(spec.stats.n_rounds, plain.stats.n_rounds) << what << ": forced tokens save no round";
    }
  }
}

// A batch: each sequence's matcher forces its own tokens.
TEST(GrammarForcedTiny, BatchesForcePerSequence) {
  std::vector<Request> reqs = {request("A person: "), request("JSON please"), request("x")};
  const std::vector<Result> batch =
      create("speculative", params({{"drafter", "model"}}))->generate_batch(reqs, BatchOptions{2, 0}, {});
  ASSERT_EQ(batch.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result alone = create("greedy", params())->generate(reqs[i], {});
    EXPECT_EQ(batch[i].tokens, alone.tokens) << "request " << i;
    EXPECT_GT(batch[i].stats.n_forced, 0) << "request " << i;
  }
}

// ---- jump-forward tokens ---------------------------------------------------------------------

// A target whose tokenizer has multi-byte tokens for the schema's text ({", name, ":, space-quote,
// count, valid, rue): its jump-forward strings have several tokenisations, the grammar admits
// both bytes and merged tokens there (so nothing is forced), and the target, its own draft model,
// picks one or the other by its random logits.
const model::LoadedModel& jump_target() {
  static const model::LoadedModel loaded = [] {
    specdec::testing::TinyGgufOptions o;
    o.merges = {{"{", "\""}, {"n", "a"}, {"m", "e"},  {"na", "me"}, {"\"", ":"}, {" ", "\""},
                {"c", "o"},  {"u", "n"}, {"co", "un"}, {"coun", "t"}, {"v", "a"},  {"l", "i"},
                {"va", "li"}, {"vali", "d"}, {"r", "u"}, {"ru", "e"}};
    return grammar_tiny::load_chat_tiny("jump.gguf", o);
  }();
  return loaded;
}

// jump_forward=true drafts the jump-forward text's tokens after the forced ones, verified: at
// T = 0 the tokens are constrained greedy's with it on and off, with every kind of drafter the
// round prepends them to, both verify modes. Some jump tokens are accepted and some rejected
// (the target tokenised that text otherwise), so a round that took them as forced (accepted
// unverified) would emit tokens greedy does not.
TEST(GrammarJumpTiny, JumpTokensAreVerifiedAndGreedyStays) {
  int64_t jump_drafted = 0, jump_accepted = 0;
  for (const std::string& prompt : {"A person: ", "JSON please"}) {
    const Request req = request(prompt, jump_target());
    const Result base = create("greedy", params())->generate(req, {});
    ASSERT_GT(base.tokens.size(), 12u) << base.text;
    for (const auto& setup : kSetups) {
      const std::string what = setup.at("drafter") + (setup.count("verify") ? " verify=block" : "");
      auto on = setup;
      on["jump_forward"] = "true";
      const Result spec = create("speculative", params(on))->generate(req, {});
      EXPECT_EQ(spec.tokens, base.tokens) << what << "\n-- greedy: " << base.text << "\n-- spec: " << spec.text;
      EXPECT_EQ(spec.finish, base.finish) << what;
      EXPECT_GT(spec.stats.n_jump_drafted, 0) << what;
      EXPECT_LE(spec.stats.n_jump, spec.stats.n_jump_drafted) << what;
      EXPECT_LE(spec.stats.n_forced + spec.stats.n_jump, spec.stats.n_accepted) << what;
      jump_drafted += spec.stats.n_jump_drafted;
      jump_accepted += spec.stats.n_jump;
      std::printf("  %-22s %-12s forced %lld, jump %lld of %lld accepted, of %lld tokens: %s\n", what.c_str(),
                  prompt.c_str(), (long long)spec.stats.n_forced, (long long)spec.stats.n_jump,
                  (long long)spec.stats.n_jump_drafted, (long long)spec.stats.n_generated, spec.text.c_str());
      const Result off = create("speculative", params(setup))->generate(req, {});
      EXPECT_EQ(off.tokens, base.tokens) << what << " jump_forward=false";
      EXPECT_EQ(off.stats.n_jump_drafted, 0) << what;
    }
  }
  EXPECT_GT(jump_accepted, 0) << "no jump token was ever accepted";
  EXPECT_LT(jump_accepted, jump_drafted) << "no jump token was ever rejected: the test cannot tell verified from assumed";
}

// prepend_forced and drafter_round on a tree: the forced chain first, the drafter's roots below
// its last token, one-hot q rows first; the drafter is shown its own nodes and rows.
TEST(GrammarForcedTiny, PrependForcedPutsTheDraftBelowTheForcedTokens) {
  DraftProposal d;
  d.tokens = {7, 8, 9};
  d.parents = {-1, -1, 0};
  d.q = at::rand({3, 10});
  const at::Tensor q = d.q.clone();
  prepend_forced(d, {4, 5});
  EXPECT_EQ(d.tokens, (Tokens{4, 5, 7, 8, 9}));
  EXPECT_EQ(d.parents, (std::vector<int32_t>{-1, 0, 1, 1, 2}));
  ASSERT_EQ(d.q.size(0), 5);
  EXPECT_TRUE(d.q.narrow(0, 2, 3).equal(q));
  EXPECT_EQ(d.q[0][4].item<float>(), 1.0f);
  EXPECT_EQ(d.q[1][5].item<float>(), 1.0f);
  EXPECT_EQ(d.q.narrow(0, 0, 2).sum().item<float>(), 2.0f);
  Round full;
  full.n_valid = 20;
  full.accepted = {0, 1, 2, 4};
  full.rows.fed = {3, 4, 5, 7, 8, 9};
  full.rows.parents = d.parents;
  const Round mine = drafter_round(full, 2);
  EXPECT_EQ(mine.n_valid, 20);
  EXPECT_EQ(mine.accepted, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(mine.rows.fed, (Tokens{5, 7, 8, 9}));
  EXPECT_EQ(mine.rows.parents, (std::vector<int32_t>{-1, -1, 0}));
}

// ---- the exact law with forced tokens ---------------------------------------------------------

using namespace specdec::testing_support::grammar_law;

// A round as the loop drafts it under a grammar that forces `c.forced` after the committed text:
// the drafter (q) drafts after them (a chain of gamma, or the tree c.parents, siblings drawn with
// replacement from their parent's row), then the real prepend_forced puts them first (one-hot q
// rows, the tree's roots below the last of them), and the reference verifies the whole.
int64_t g_forced_rejections = 0;  // outcomes that did not accept every forced token

// A drafted chain (in.draft, in.q) verified by the reference against the true target's rows.
ref::Outcome verify_drafted_chain(ref::Enumerator& e, ref::RowCache& rows, ref::Mode mode, ref::ChainInput in,
                                  ref::Plant plant) {
  in.p = rows.verifier_rows(in.draft, {});
  in.final_u = in.n();
  ref::EnumerationSource src(e);
  return ref::verify_chain(mode, in, src, plant);
}

ref::RoundOutput forced_round(ref::Enumerator& e, ref::RowCache& rows, const GrammarLawCase& c, ref::Plant plant) {
  const ref::Tokens head(c.forced.begin(), c.forced.end());
  const bool chain = c.parents.empty();
  const int n = chain ? c.gamma : static_cast<int>(c.parents.size());
  std::vector<ref::Tokens> paths(n);  // each node's path after the committed text
  strategies::DraftProposal d;
  std::vector<ref::Row> q;
  for (int i = 0; i < n; ++i) {
    const int parent = chain ? i - 1 : c.parents[i];
    const ref::Tokens from = parent < 0 ? head : paths[parent];
    q.push_back(rows.q(from));
    d.tokens.push_back(e.choose(q.back()));
    paths[i] = from;
    paths[i].push_back(static_cast<int>(d.tokens.back()));
  }
  if (!chain) d.parents.assign(c.parents.begin(), c.parents.end());
  d.q = at::empty({n, kLawV}, at::kDouble);
  auto qa = d.q.accessor<double, 2>();
  for (int i = 0; i < n; ++i)
    for (int v = 0; v < kLawV; ++v) qa[i][v] = q[i][v];
  strategies::prepend_forced(d, c.forced);
  const auto rows_of = [&] {
    std::vector<ref::Row> out(d.tokens.size(), ref::Row(kLawV));
    const auto a = d.q.accessor<double, 2>();
    for (size_t i = 0; i < d.tokens.size(); ++i)
      for (int v = 0; v < kLawV; ++v) out[i][v] = a[i][v];
    return out;
  };
  const ref::Tokens tokens(d.tokens.begin(), d.tokens.end());
  if (d.parents.empty()) {
    ref::ChainInput in;
    in.draft = tokens;
    in.q = rows_of();
    const ref::Outcome o = verify_drafted_chain(e, rows, c.mode, std::move(in), plant);
    g_forced_rejections += o.accepted < static_cast<int>(head.size());
    return {o.tokens, o.accepted};
  }
  ref::TreeInput t;
  t.tokens = tokens;
  t.parents.assign(d.parents.begin(), d.parents.end());
  t.q = rows_of();
  t.p = rows.verifier_rows(tokens, t.parents);
  t.final_u = t.n();
  ref::EnumerationSource src(e);
  const ref::Outcome o = ref::verify_tree(c.mode, t, src, plant);
  g_forced_rejections += o.accepted < static_cast<int>(head.size());
  return {o.tokens, o.accepted};
}

// Forced tokens drafted for free (issue 57, item 5): after "a" the grammar admits only "b", which
// the round drafts first with a one-hot q row; every mode still gives the constrained target's
// law exactly, and accepts the forced token always.
TEST(GrammarForcedLaw, EveryModeReproducesTheConstrainedTarget) {
  double worst = 0;
  int64_t cases = 0;
  g_forced_rejections = 0;
  for (uint64_t seed : {1, 2})
    for (const GrammarLawCase& c : grammar_law_cases(seed, /*forced=*/true)) {
      ASSERT_EQ(c.forced, Tokens{2}) << c.label;
      const ref::RoundLaw r = grammar_law(c, ref::Plant::none, forced_round);
      EXPECT_LE(r.tv, 1e-12) << c.label << ", seed " << seed;
      EXPECT_NEAR(r.mass, 1.0, 1e-12) << c.label;
      EXPECT_EQ(r.uniform_reuses, 0) << c.label;
      worst = std::max(worst, r.tv), ++cases;
    }
  EXPECT_EQ(g_forced_rejections, 0) << "enumerated outcomes that rejected the forced token";
  std::printf("  %lld cases with a forced token, worst TV %.3g\n", static_cast<long long>(cases), worst);
}

// The grammar's lead along a chain (speculative's draft_lead, drafters/model.cpp): after each
// draw, the tokens ConstraintState::lead_along gives after the path so far (here: "b" after an
// admitted "a") join the chain with a one-hot q row, and the draft goes on after them; the
// chain's length then depends on its own draws. Drafted as append_lead does, with the real
// lead_along, and verified by the reference.
int64_t g_leads = 0;  // enumerated drafts that took a lead token

ref::RoundOutput lead_round(ref::Enumerator& e, ref::RowCache& rows, const GrammarLawCase& c, ref::Plant plant) {
  static const TinyTokenizer tok;
  static const auto state = Constraint::parse("regex", "(ab|c)+")->start(&tok, {5, 1, 2}, {0});
  specdec::Tokens path = {5, 1, 2};  // the committed text (grammar_law_cases without forced tokens)
  ref::ChainInput in;
  for (int i = 0; i < c.gamma; ++i) {
    in.q.push_back(rows.q(in.draft));
    in.draft.push_back(e.choose(in.q.back()));
    path.push_back(in.draft.back());
    for (const TokenId t : state->lead_along(path, kLawV, 8, /*forced=*/true, /*jump=*/false).tokens) {
      ref::Row one_hot(kLawV, 0.0);
      one_hot[t] = 1.0;
      in.q.push_back(one_hot);
      in.draft.push_back(t);
      path.push_back(t);
      ++g_leads;
    }
  }
  const ref::Outcome o = verify_drafted_chain(e, rows, c.mode, std::move(in), plant);
  return {o.tokens, o.accepted};
}

TEST(GrammarForcedLaw, LeadTokensAlongTheChainKeepTheConstrainedLaw) {
  double worst = 0;
  int64_t cases = 0;
  g_leads = 0;
  for (uint64_t seed : {1, 2})
    for (GrammarLawCase c : grammar_law_cases(seed)) {
      if (!c.parents.empty()) continue;
      c.length = 2 * c.gamma + 1;  // each draw may bring one lead token
      const ref::RoundLaw r = grammar_law(c, ref::Plant::none, lead_round);
      EXPECT_LE(r.tv, 1e-12) << c.label << ", seed " << seed;
      EXPECT_NEAR(r.mass, 1.0, 1e-12) << c.label;
      worst = std::max(worst, r.tv), ++cases;
    }
  EXPECT_GT(g_leads, 0) << "no enumerated draft took a lead token";
  std::printf("  %lld chain cases with lead tokens after draws, worst TV %.3g\n", static_cast<long long>(cases), worst);
}

}  // namespace test_strategies_grammar_forced_tiny
