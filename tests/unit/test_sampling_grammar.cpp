// Structured output (sampling/grammar.h) on a ten-token vocabulary: every row gets the mask of
// its own path (chains and trees), the end id only once the grammar is complete, a row off the
// grammar is left whole; bad constraints are named errors (key + xgrammar's message).
//
// GrammarLaw.*: speculative decoding under a constraint is lossless, proved exactly. The
// independent reference (tests/reference/, exact enumeration, see test_kernels_reference.cpp)
// verifies with target rows masked by the real Constraint (ConstraintState::mask over each
// round's whole draft, chain or tree, as SpecLoop::verify calls it); the target law it must
// reproduce is masked by a hand-written automaton of the same language. Every mode (chain:
// greedy, token-wise, tokens-only, block, gamma 1-3; tree: greedy, multi-draft sampling,
// tokens-only, [2], [3], [2,1]), eight processor chains after the mask, regex and EBNF keys:
// TV <= 1e-12 against the constrained target's law of the text up to L tokens or its end id.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/processors.h"
#include "tests/support/grammar_law.h"
#include "tokenizer/tokenizer.h"

using namespace specdec;
using sampling::Constraint;
using namespace specdec::testing_support::grammar_law;

namespace {

constexpr int64_t kV = 8;  // the logits' width: one padding id beyond the tokenizer's 7

// The admitted ids of each row after mask() of zero logits.
std::vector<std::vector<int>> admitted(sampling::ConstraintState& s, int64_t rows, const Tokens& context,
                                       const Tokens& draft = {}, const std::vector<int32_t>& parents = {}) {
  at::Tensor logits = at::zeros({rows, kV});
  s.mask(logits, context, draft, parents);
  std::vector<std::vector<int>> out(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < kV; ++v)
      if (!std::isinf(logits[r][v].item<float>())) out[r].push_back(static_cast<int>(v));
  return out;
}

using Rows = std::vector<std::vector<int>>;

TEST(SamplingGrammar, ChainRowsFollowTheirOwnPath) {
  TinyTokenizer tok;
  const auto c = Constraint::parse("regex", "a[bc]c");
  auto s = c->start(&tok, /*prompt=*/{5, 5}, {0});
  // row 0 after the prompt: a, ab; row 1 after "a": b, c; row 2 after "ab": c; row 3 after
  // "abc": the end id only.
  EXPECT_EQ(admitted(*s, 4, {5, 5}, {1, 2, 3}), (Rows{{1, 4}, {2, 3}, {3}, {0}}));
  // The matcher rolled back: the committed text alone gives row 0 again; then it follows it.
  EXPECT_EQ(admitted(*s, 1, {5, 5}), (Rows{{1, 4}}));
  EXPECT_EQ(admitted(*s, 2, {5, 5, 4}, {3}), (Rows{{3}, {0}}));
  EXPECT_EQ(s->n_accepted(), 1);
  EXPECT_FALSE(s->terminated());
}

TEST(SamplingGrammar, AnEndIdEndsThePath) {
  TinyTokenizer tok;
  auto s = Constraint::parse("regex", "a[bc]c")->start(&tok, {}, {0});
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  // A draft through the end id: the rows after it are left whole, and the matcher is not
  // left terminated by the walk (the next call masks as before).
  EXPECT_EQ(admitted(*s, 4, {4}, {3, 0, 1}), (Rows{{3}, {0}, all, all}));
  EXPECT_EQ(admitted(*s, 2, {4}, {3}), (Rows{{3}, {0}}));
  EXPECT_FALSE(s->terminated());
  EXPECT_EQ(admitted(*s, 1, {4, 3, 0}), (Rows{all}));  // committed: ended
  EXPECT_TRUE(s->terminated());
}

TEST(SamplingGrammar, TreeRowsFollowTheirOwnPathAndOffGrammarRowsStayWhole) {
  TinyTokenizer tok;
  const auto c = Constraint::parse("regex", "a[bc]c");
  auto s = c->start(&tok, {}, {0});
  // nodes: 0 "a" (root), 1 "x" (root: off the grammar), 2 "b" (after 0), 3 "c" (after 0),
  //        4 "c" (after 2), 5 "a" (after 1: below an off-grammar node)
  const Rows rows = admitted(*s, 7, {}, {1, 5, 2, 3, 3, 1}, {-1, -1, 0, 0, 2, 1});
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(rows, (Rows{{1, 4}, {2, 3}, all, {3}, {3}, {0}, all}));
}

TEST(SamplingGrammar, CommittedTokenOutsideTheGrammarIsANamedError) {
  TinyTokenizer tok;
  auto s = Constraint::parse("regex", "a[bc]c")->start(&tok, {}, {0});
  try {
    admitted(*s, 1, {5});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not admitted by the grammar"), std::string::npos) << e.what();
  }
}

TEST(SamplingGrammar, EbnfAndJsonConstrain) {
  TinyTokenizer tok;
  auto g = Constraint::parse("grammar", "root ::= \"a\" (\"b\" | \"c\")*")->start(&tok, {}, {0});
  EXPECT_EQ(admitted(*g, 2, {}, {1}), (Rows{{1, 4}, {0, 2, 3}}));
  EXPECT_NE(Constraint::parse("response_format", "json"), nullptr);
  EXPECT_EQ(Constraint::parse("response_format", "json")->key(), "response_format");
}

// A bad constraint is a specdec::Error naming its key and what is wrong.
void expect_error(const std::string& key, const std::string& value, const std::string& needle) {
  try {
    Constraint::parse(key, value);
    FAIL() << key << "=" << value << ": no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(key + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    // xgrammar's "[hh:mm:ss] /path/file.cc:N: " and "Check failed: ..." are stripped, its echo of the input too.
    EXPECT_EQ(m.find(".cc:"), std::string::npos) << m;
    EXPECT_EQ(m.find("] "), std::string::npos) << m;
    EXPECT_EQ(m.find("Check failed"), std::string::npos) << m;
    EXPECT_EQ(m.find("The JSON string is"), std::string::npos) << m;
  }
}

TEST(SamplingGrammar, BadInputsAreNamedErrors) {
  expect_error("json_schema", "{\"type\": \"object\", \"properties\": {", "malformed JSON schema");
  expect_error("json_schema", "{\"type\": 12}", "malformed JSON schema");
  expect_error("json_schema", "no/such/schema.json", "neither inline JSON");
  expect_error("regex", "(ab", "malformed regular expression");
  expect_error("grammar", "root ::= (\"a\"", "malformed grammar");
  expect_error("grammar", "root ::= undefined_rule", "malformed grammar");
  expect_error("grammar", "no/such/grammar.gbnf", "neither an inline EBNF grammar");
  expect_error("response_format", "yaml", "not a response format");
  // xgrammar's line and column stay; a grammar file is named.
  expect_error("regex", "(ab", "malformed regular expression: Regex parsing error at position 4");
  expect_error("grammar", "root ::= (\"a\"", "malformed grammar: EBNF parser error at line 1, column 14");
  expect_error("json_schema", "{\"type\":", "malformed JSON schema (not JSON, or not a schema xgrammar takes): Failed to parse JSON: syntax error at line 1");
  const std::string bad = ::testing::TempDir() + "specdec_bad.gbnf";
  std::ofstream(bad) << "root ::= \"a\"\nfoo ::= bar\n";
  expect_error("grammar", bad, "file '" + bad + "': malformed grammar: EBNF parser error at line 2, column 9");
  // A language with no string: named at parse time.
  expect_error("regex", "[^\\s\\S]", "the regular expression matches nothing");
  expect_error("grammar", "root ::= [^\\x00-\\U0010FFFF]", "the grammar matches nothing");
  try {
    Constraint::from_params({{"regex", "a"}, {"json_schema", "{}"}});
    FAIL() << "two keys: no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most one"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Constraint::parse("regex", "a")->start(nullptr, {}, {}), Error);
}

// The tokens the grammar forces (one admitted token at a time, never an end id), at most `max`;
// the matcher is left after the committed text.
TEST(SamplingGrammar, ForcedTokens) {
  TinyTokenizer tok;
  auto s = Constraint::parse("regex", "a[bc]cx(a|b)")->start(&tok, {5}, {0});
  const auto forced = [&](const Tokens& context, int64_t max) { return s->lead(context, kV, max, true, false).tokens; };
  EXPECT_EQ(forced({5}, 8), Tokens{});          // a, ab
  EXPECT_EQ(forced({5, 1}, 8), Tokens{});       // b, c
  EXPECT_EQ(forced({5, 1, 2}, 8), (Tokens{3, 5}));  // "c", "x", then a or b
  EXPECT_EQ(forced({5, 1, 2}, 1), Tokens{3});
  EXPECT_EQ(admitted(*s, 1, {5, 1, 2}), (Rows{{3}}));  // the matcher is where the text is
  EXPECT_EQ(forced({5, 1, 2, 3, 5, 1}, 8), Tokens{});  // complete: the end id only
  EXPECT_EQ(s->n_accepted(), 5);
}

// The jump-forward tokens after the forced ones (issue 57, item 5): the rest of the text every
// continuation starts with, tokenised as the tokenizer does (longest match: "ab", "c"), cut at
// `max`; n_forced counts only the forced. Without forced tokens the jump starts at the context.
TEST(SamplingGrammar, LeadIsForcedThenJumpTokens) {
  TinyTokenizer tok;
  auto s = Constraint::parse("regex", "xabcx(a|b)")->start(&tok, {5}, {0});
  using Lead = sampling::ConstraintState::Lead;
  const auto lead = [&](const Tokens& context, int64_t max, bool forced, bool jump) {
    const Lead l = s->lead(context, kV, max, forced, jump);
    return std::make_pair(l.tokens, l.n_forced);
  };
  using P = std::pair<Tokens, int64_t>;
  // After the prompt: "x" forced (the only token), then "a" and "ab" admitted: the jump "abcx"
  // tokenised ab, c, x; then a or b.
  EXPECT_EQ(lead({5}, 8, true, false), (P{{5}, 1}));
  EXPECT_EQ(lead({5}, 8, true, true), (P{{5, 4, 3, 5}, 1}));
  EXPECT_EQ(lead({5}, 3, true, true), (P{{5, 4, 3}, 1}));
  EXPECT_EQ(lead({5}, 8, false, true), (P{{5, 4, 3, 5}, 0}));
  EXPECT_EQ(lead({5}, 8, false, false), (P{{}, 0}));
  // After "x", "a" (the target's own tokenisation, not the jump's): "b", "c", "x" one at a time.
  EXPECT_EQ(lead({5, 5, 1}, 8, true, true), (P{{2, 3, 5}, 3}));
  EXPECT_EQ(lead({5, 5, 1}, 8, false, true), (P{{2, 3, 5}, 0}));
  EXPECT_EQ(admitted(*s, 1, {5, 5, 1}), (Rows{{2}}));  // the matcher is where the text is
  EXPECT_EQ(lead({5, 5, 1, 2, 3, 5, 2}, 8, true, true), (P{{}, 0}));  // complete: the end id only
}

// The emptiness check compiles a grammar once per process: the same constraint parsed again
// (every prompt of a task set with one schema) compiles nothing.
TEST(SamplingGrammar, EmptinessIsCheckedOncePerConstraint) {
  const std::string schema = R"({"type": "object", "properties": {"probe_once": {"type": "integer"}}})";
  const int64_t before = Constraint::emptiness_probes();
  Constraint::parse("json_schema", schema);
  EXPECT_EQ(Constraint::emptiness_probes(), before + 1);
  for (int i = 0; i < 3; ++i) Constraint::parse("json_schema", schema);
  Constraint::from_params({{"json_schema", schema}});
  EXPECT_EQ(Constraint::emptiness_probes(), before + 1);
  // Still named: an empty language parsed twice is an error both times.
  for (int i = 0; i < 2; ++i) EXPECT_THROW(Constraint::parse("regex", "[^\\s\\S]"), Error);
}

TEST(SamplingGrammar, NoConstraintWhenNoneIsSet) {
  EXPECT_EQ(Constraint::from_params({}), nullptr);
  EXPECT_EQ(Constraint::from_params({{"json_schema", ""}, {"regex", ""}, {"response_format", "text"}}), nullptr);
  // A schema from a file.
  const std::string path = ::testing::TempDir() + "specdec_schema.json";
  std::ofstream(path) << "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}}";
  const auto c = Constraint::from_params({{"json_schema", path}});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->key(), "json_schema");
}

// At T = 0 the verifier and greedy read each row's arg-max alone, so mask(..., argmax) leaves a
// row whole where the grammar admits its processed arg-max. On random rows, chains and trees
// (tokens on and off the grammar, the end id, the padding id) and a repetition penalty that
// sees each row's own path, the arg-max rows it gives are the fully masked rows' arg-max
// (sampling::probabilities, one-hot at T = 0, as the verifier takes them), and it does skip
// masks as well as make them.
TEST(SamplingGrammar, ArgmaxOnlyRowsPickWhatTheMaskedRowsPick) {
  TinyTokenizer tok;
  const auto c = Constraint::parse("regex", "(ab|c)+");
  std::mt19937 gen(11);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::uniform_int_distribution<int> id(0, static_cast<int>(kV) - 1);
  int64_t skipped = 0, masked = 0;
  for (const double penalty : {1.0, 1.8}) {
    sampling::ProcessorConfig cfg;
    cfg.temperature = 0;
    cfg.repetition_penalty = penalty;
    const Tokens context = {5, 1, 2, 3};  // "x", then "abc" generated
    auto full_state = c->start(&tok, {5}, {0});
    auto lazy_state = c->start(&tok, {5}, {0});
    for (int trial = 0; trial < 300; ++trial) {
      const int n = 1 + trial % 4;  // draft nodes
      Tokens draft;
      std::vector<int32_t> parents;
      for (int j = 0; j < n; ++j) {
        draft.push_back(j % 2 == 0 && gen() % 3 ? (gen() % 2 ? 1 : 3) : (j % 2 ? 2 : id(gen)));
        if (trial % 2) parents.push_back(static_cast<int32_t>(gen() % (j + 1)) - 1);  // a tree
      }
      at::Tensor logits = at::empty({n + 1, kV});
      for (int64_t r = 0; r <= n; ++r)
        for (int64_t v = 0; v < kV; ++v) logits[r][v] = logit(gen);
      at::Tensor full = logits.clone(), lazy = logits.clone();
      full_state->mask(full, context, draft, parents);
      lazy_state->mask(lazy, context, draft, parents, &cfg);
      EXPECT_TRUE(at::equal(sampling::probabilities(full, cfg, context, draft, parents),
                            sampling::probabilities(lazy, cfg, context, draft, parents)))
          << "penalty " << penalty << ", trial " << trial;
      for (int64_t r = 0; r <= n; ++r) {
        if (at::equal(full[r], logits[r])) continue;  // a row off the grammar, or one the grammar leaves whole
        (at::equal(lazy[r], logits[r]) ? skipped : masked) += 1;
      }
    }
  }
  EXPECT_GT(skipped, 100);
  EXPECT_GT(masked, 100);
}

// ---- the exact law with a constraint ----------------------------------------------------------

TEST(GrammarLaw, EveryModeReproducesTheConstrainedTarget) {
  double worst = 0;
  int64_t paths = 0, cases = 0;
  for (uint64_t seed : {1, 2})
    for (const GrammarLawCase& c : grammar_law_cases(seed)) {
      const ref::RoundLaw r = grammar_law(c);
      EXPECT_LE(r.tv, 1e-12) << c.label << ", seed " << seed;
      EXPECT_NEAR(r.mass, 1.0, 1e-12) << c.label;
      EXPECT_EQ(r.uniform_reuses, 0) << c.label;
      worst = std::max(worst, r.tv), paths += r.paths, ++cases;
    }
  std::printf("  %lld cases, %lld enumerated paths, worst TV %.3g\n", static_cast<long long>(cases),
              static_cast<long long>(paths), worst);
}

}  // namespace

namespace {

// A planted bug in the reference's rows: the mask after top-k / top-p / min-p instead of first.
TEST(GrammarLaw, TheMaskAfterTheFiltersIsCaught) {
  double worst = 0;
  std::string where;
  for (uint64_t seed : {1, 2})
    for (const GrammarLawCase& c : grammar_law_cases(seed)) {
      const ref::RoundLaw r = grammar_law(c, ref::Plant::mask_after_filters);
      if (r.tv > worst) worst = r.tv, where = c.label + ", seed " + std::to_string(seed);
    }
  std::printf("  mask after the filters: worst TV %.3g (%s)\n", worst, where.c_str());
  EXPECT_GT(worst, 1e-3);
}

}  // namespace
