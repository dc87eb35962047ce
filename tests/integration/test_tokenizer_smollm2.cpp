// SmolLM2-135M-Instruct tokenizer from the real GGUF against Hugging Face fixtures
// (tests/fixtures/tokenizer/smollm2.json, written by scripts/reference/make_tokenizer_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::source_dir;

namespace specdec::tokenizer {
namespace {

const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";
const std::string kSmolLM2Fixture = source_dir() + "/tests/fixtures/tokenizer/smollm2.json";

nlohmann::json load_fixture() {
  std::ifstream in(kSmolLM2Fixture);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::ifstream(kModel).good()) return;
    gguf_ = io::GgufFile::open(kModel);
    tok_ = Tokenizer::from_gguf(*gguf_);
    fixture_ = load_fixture();
  }
  void SetUp() override {
    ASSERT_TRUE(tok_) << "missing " << kModel << ": run `scripts/fetch_models.sh smollm2-135m`";
  }
  static inline std::shared_ptr<io::GgufFile> gguf_;
  static inline std::shared_ptr<Tokenizer> tok_;
  static inline nlohmann::json fixture_;
};

TEST_F(SmolLM2Tokenizer, MetadataMatchesHF) {
  EXPECT_EQ(tok_->vocab_size(), fixture_["vocab_size"].get<int64_t>());
  EXPECT_EQ(tok_->bos_id(), fixture_["bos_token_id"].get<TokenId>());
  auto eos = tok_->eos_ids();
  EXPECT_EQ(eos.front(), fixture_["eos_token_id"].get<TokenId>());
  EXPECT_NE(std::find(eos.begin(), eos.end(), 0), eos.end()) << "<|endoftext|> is an end token";
  EXPECT_TRUE(tok_->is_special(1));
  EXPECT_FALSE(tok_->is_special(28120));  // "hello"
  EXPECT_EQ(tok_->token_string(28120), "hello");
  EXPECT_EQ(tok_->token_string(256), "\xC4\xA0\xC4\xA0");  // "ĠĠ"
  EXPECT_EQ(tok_->token_bytes(256), "  ");
}

TEST_F(SmolLM2Tokenizer, EncodesEveryFixtureTextLikeHF) {
  ASSERT_GE(fixture_["texts"].size(), 30u);
  int n_mismatch = 0;
  for (const auto& t : fixture_["texts"]) {
    const std::string text = t["text"].get<std::string>();
    const Tokens expected = t["ids"].get<Tokens>();
    Tokens got = tok_->encode(text);
    if (got != expected) ++n_mismatch;
    EXPECT_EQ(got, expected) << "text: \"" << text << "\"";
  }
  EXPECT_EQ(n_mismatch, 0);
}

// True when every byte of text has a byte token (SmolLM2's vocabulary lacks a few control
// bytes such as 0x04; HF drops those, so such texts cannot round-trip).
bool spellable(const BpeTokenizer& tok, const std::string& text) {
  for (unsigned char c : text)
    if (tok.token_id(byte_to_symbol(c)) < 0) return false;
  return true;
}

TEST_F(SmolLM2Tokenizer, DecodeInvertsEncode) {
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok_.get());
  ASSERT_NE(bpe, nullptr);
  int n_checked = 0;
  for (const auto& t : fixture_["texts"]) {
    const std::string text = t["text"].get<std::string>();
    ASSERT_TRUE(is_valid_utf8(text));
    if (!spellable(*bpe, text)) continue;
    ++n_checked;
    EXPECT_EQ(tok_->decode(tok_->encode(text)), text);
    EXPECT_EQ(tok_->decode(t["ids"].get<Tokens>()), text) << "decoding HF's ids";
  }
  EXPECT_GE(n_checked, 30);
}

TEST_F(SmolLM2Tokenizer, SkipSpecialDropsControlTokens) {
  Tokens ids = tok_->encode("<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tok_->decode(ids, /*skip_special=*/true), "user\nhi\n");
}

TEST_F(SmolLM2Tokenizer, PartialUtf8TokensDecodeWithReplacement) {
  // "😀" is split over several byte tokens; a prefix is an incomplete sequence -> one U+FFFD.
  Tokens ids = tok_->encode("\xF0\x9F\x98\x80");
  ASSERT_GE(ids.size(), 2u);
  std::string prefix_bytes = tok_->token_bytes(ids[0]);
  EXPECT_FALSE(is_valid_utf8(prefix_bytes));
  EXPECT_EQ(tok_->decode({ids[0]}), "\xEF\xBF\xBD");
}

TEST_F(SmolLM2Tokenizer, ChatTemplateMatchesHF) {
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok_.get());
  ASSERT_NE(bpe, nullptr);
  EXPECT_EQ(bpe->default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  ASSERT_GE(fixture_["chats"].size(), 2u);
  for (const auto& c : fixture_["chats"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    std::string rendered = tok_->apply_chat_template(messages, c["add_generation_prompt"].get<bool>());
    EXPECT_EQ(rendered, c["rendered"].get<std::string>());
    EXPECT_EQ(tok_->encode(rendered, /*add_special=*/false), c["ids"].get<Tokens>());
  }
}

TEST_F(SmolLM2Tokenizer, InvalidUtf8InputDoesNotCrashAndRoundTripsBytes) {
  const std::string bad = "ok \xC3 trunc \xE2\x82 end\x80 \xED\xA0\x80 surrogate";
  Tokens ids = tok_->encode(bad);
  ASSERT_FALSE(ids.empty());
  std::string bytes;
  for (TokenId id : ids) bytes += tok_->token_bytes(id);
  EXPECT_EQ(bytes, bad);  // every byte here has a byte token, so nothing is lost
  EXPECT_EQ(tok_->decode(ids), "ok \xEF\xBF\xBD trunc \xEF\xBF\xBD end\xEF\xBF\xBD "
                               "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD surrogate");
  // 0xFF and 0xFE have no byte token in SmolLM2's vocabulary: dropped, as HF drops them.
  EXPECT_EQ(tok_->encode("a\xFF\xFE"), tok_->encode("a"));
}

TEST_F(SmolLM2Tokenizer, RandomBytesAndLongRunsNeverCrash) {
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok_.get());
  ASSERT_NE(bpe, nullptr);
  std::mt19937 rng(1234);
  for (int round = 0; round < 50; ++round) {
    std::string text(size_t(rng() % 400), '\0');
    for (char& c : text) c = char(rng() % 256);
    std::string kept;  // bytes without a byte token are dropped, as HF does
    for (unsigned char c : text)
      if (bpe->token_id(byte_to_symbol(c)) >= 0) kept += char(c);
    std::string bytes;
    for (TokenId id : tok_->encode(text, false)) bytes += tok_->token_bytes(id);
    // Random bytes may spell "<|im_start|>" only with vanishing probability; the byte
    // sequence is then exactly what survives.
    ASSERT_EQ(bytes, kept) << "round " << round;
  }
  // Pathological runs: one huge whitespace run / word / digit run each.
  for (const std::string& run : {std::string(200000, ' '), std::string(200000, 'a'),
                                 std::string(100000, '7'), std::string(50000, '\n') + "x"}) {
    std::string bytes;
    for (TokenId id : tok_->encode(run)) bytes += tok_->token_bytes(id);
    EXPECT_EQ(bytes, run);
  }
}

// HF decode (errors='replace' semantics) of every prefix of multi-byte texts, with and
// without skip_special_tokens.
TEST_F(SmolLM2Tokenizer, DecodesLikeHF) {
  ASSERT_GE(fixture_["decodes"].size(), 50u);
  for (const auto& d : fixture_["decodes"]) {
    Tokens ids = d["ids"].get<Tokens>();
    EXPECT_EQ(tok_->decode(ids, d["skip_special"].get<bool>()), d["text"].get<std::string>())
        << "ids " << d["ids"].dump() << " skip_special " << d["skip_special"];
  }
}

// Seeded random strings over characters where PCRE2 and HF's Oniguruma disagree unless
// patched (U+180E, Unicode 15/16 letters and digits, U+2028, U+0085, ...), with special tokens.
TEST_F(SmolLM2Tokenizer, EncodesRandomUnicodeSoupLikeHF) {
  ASSERT_GE(fixture_["soup"].size(), 400u);
  int n_mismatch = 0;
  for (const auto& t : fixture_["soup"]) {
    const std::string text = t["text"].get<std::string>();
    Tokens got = tok_->encode(text);
    if (got != t["ids"].get<Tokens>() && ++n_mismatch <= 5)
      ADD_FAILURE() << "text " << nlohmann::json(text).dump() << " differs from HF";
  }
  EXPECT_EQ(n_mismatch, 0);
}

// Optional: the same checks through from_hf_json on the tokenizer.json the reference script
// exports (make_tokenizer_fixtures.py --export-json <build dir>/hf_tokenizers). Not in git, so
// skipped when absent; SPECDEC_HF_TOKENIZERS overrides the folder.
TEST_F(SmolLM2Tokenizer, HfJsonLoaderAgreesWithGgufAndHF) {
  const char* env = std::getenv("SPECDEC_HF_TOKENIZERS");
  const std::string dir = (env ? std::string(env) : binary_dir() + "/hf_tokenizers") + "/smollm2";
  if (!std::ifstream(dir + "/tokenizer.json").good())
    GTEST_SKIP() << "no " << dir << "/tokenizer.json (run make_tokenizer_fixtures.py --export-json)";
  auto hf = Tokenizer::from_hf_json(dir + "/tokenizer.json");
  ASSERT_EQ(hf->vocab_size(), tok_->vocab_size());
  for (TokenId id = 0; id < hf->vocab_size(); ++id) {
    ASSERT_EQ(hf->token_string(id), tok_->token_string(id)) << "id " << id;
    ASSERT_EQ(hf->is_special(id), tok_->is_special(id)) << "id " << id;
  }
  EXPECT_EQ(hf->bos_id(), tok_->bos_id());
  EXPECT_EQ(hf->eos_ids().front(), tok_->eos_ids().front());
  for (const char* set : {"texts", "soup"})
    for (const auto& t : fixture_[set])
      EXPECT_EQ(hf->encode(t["text"].get<std::string>()), t["ids"].get<Tokens>()) << t["text"];
  for (const auto& c : fixture_["chats"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    EXPECT_EQ(hf->apply_chat_template(messages, c["add_generation_prompt"].get<bool>()),
              c["rendered"].get<std::string>());
  }
}

}  // namespace
}  // namespace specdec::tokenizer
