// Structured output (sampling/grammar.h) on a ten-token vocabulary: every row gets the mask of
// its own path (chains and trees), the end id only once the grammar is complete, a row off the
// grammar is left whole; bad constraints are named errors (key + xgrammar's message).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "sampling/grammar.h"
#include "tokenizer/tokenizer.h"

using namespace specdec;
using sampling::Constraint;

namespace {

// id: 0 "<eos>" (special, the end id), 1 "a", 2 "b", 3 "c", 4 "ab", 5 "x", 6 "<pad>" (special)
class TinyTokenizer : public tokenizer::Tokenizer {
 public:
  Tokens encode(const std::string&, bool) const override { return {}; }
  std::string decode(const Tokens& ids, bool) const override {
    std::string s;
    for (TokenId t : ids) s += token_bytes(t);
    return s;
  }
  std::string token_bytes(TokenId id) const override { return is_special(id) ? "" : strings_[id]; }
  const std::string& token_string(TokenId id) const override { return strings_[id]; }
  int64_t vocab_size() const override { return static_cast<int64_t>(strings_.size()); }
  TokenId bos_id() const override { return -1; }
  std::vector<TokenId> eos_ids() const override { return {0}; }
  bool is_special(TokenId id) const override { return id == 0 || id == 6; }
  std::string apply_chat_template(const std::vector<tokenizer::ChatMessage>&, bool) const override { return ""; }

 private:
  std::vector<std::string> strings_ = {"<eos>", "a", "b", "c", "ab", "x", "<pad>"};
};

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
  try {
    Constraint::from_params({{"regex", "a"}, {"json_schema", "{}"}});
    FAIL() << "two keys: no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most one"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Constraint::parse("regex", "a")->start(nullptr, {}, {}), Error);
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

}  // namespace
