// Qwen2.5-Coder tokenizer (0.5B GGUF; the 1.5B shares it) against Hugging Face fixtures
// (tests/fixtures/tokenizer/qwen2.5-coder.json, scripts/reference/make_tokenizer_fixtures.py).
// Label slow: the Qwen files are large and not fetched in CI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::source_dir;

namespace specdec::tokenizer {
namespace {

const std::string kModels = source_dir() + "/models/";
const std::string kFixture = source_dir() + "/tests/fixtures/tokenizer/qwen2.5-coder.json";

std::shared_ptr<Tokenizer> load(const std::string& file) {
  if (!std::ifstream(kModels + file).good()) return nullptr;
  return Tokenizer::from_gguf(*io::GgufFile::open(kModels + file));
}

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = load("qwen2.5-coder-0.5b-instruct.gguf");
    std::ifstream in(kFixture);
    std::stringstream ss;
    ss << in.rdbuf();
    fixture_ = nlohmann::json::parse(ss.str());
  }
  void SetUp() override {
    ASSERT_TRUE(tok_) << "missing " << kModels
                      << "qwen2.5-coder-0.5b-instruct.gguf: run `scripts/fetch_models.sh qwen2.5-coder-0.5b`";
  }
  static inline std::shared_ptr<Tokenizer> tok_;
  static inline nlohmann::json fixture_;
};

TEST_F(QwenTokenizer, MetadataMatchesHF) {
  EXPECT_EQ(tok_->vocab_size(), 151936);  // embedding rows; HF counts fewer (no [PAD] rows)
  auto eos = tok_->eos_ids();
  EXPECT_EQ(eos.front(), fixture_["eos_token_id"].get<TokenId>());  // <|im_end|>
  EXPECT_NE(std::find(eos.begin(), eos.end(), 151643), eos.end());  // <|endoftext|>
  EXPECT_TRUE(tok_->is_special(151644));
  EXPECT_FALSE(tok_->is_special(151657));  // <tool_call> is added but not special
  EXPECT_EQ(tok_->encode("<tool_call>"), Tokens{151657});
}

TEST_F(QwenTokenizer, EncodesEveryFixtureTextLikeHF) {
  ASSERT_GE(fixture_["texts"].size(), 30u);
  for (const auto& t : fixture_["texts"]) {
    const std::string text = t["text"].get<std::string>();
    EXPECT_EQ(tok_->encode(text), t["ids"].get<Tokens>()) << "text: \"" << text << "\"";
    EXPECT_EQ(tok_->decode(tok_->encode(text)), text);
  }
}

TEST_F(QwenTokenizer, ChatTemplateMatchesHF) {
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok_.get());
  ASSERT_NE(bpe, nullptr);
  EXPECT_EQ(bpe->default_system_prompt(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  for (const auto& c : fixture_["chats"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    std::string rendered = tok_->apply_chat_template(messages, c["add_generation_prompt"].get<bool>());
    EXPECT_EQ(rendered, c["rendered"].get<std::string>());
    EXPECT_EQ(tok_->encode(rendered, false), c["ids"].get<Tokens>());
  }
}

// HF decode (errors='replace' semantics) of every prefix of multi-byte texts, with and
// without skip_special_tokens.
TEST_F(QwenTokenizer, DecodesLikeHF) {
  ASSERT_GE(fixture_["decodes"].size(), 50u);
  for (const auto& d : fixture_["decodes"]) {
    Tokens ids = d["ids"].get<Tokens>();
    EXPECT_EQ(tok_->decode(ids, d["skip_special"].get<bool>()), d["text"].get<std::string>())
        << "ids " << d["ids"].dump() << " skip_special " << d["skip_special"];
  }
}

// Seeded random strings over characters where PCRE2 and HF's Oniguruma disagree unless
// patched (U+180E, Unicode 15/16 letters and digits, U+2028, U+0085, ...), with special tokens.
TEST_F(QwenTokenizer, EncodesRandomUnicodeSoupLikeHF) {
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

// The 1.5B target and the 0.5B draft must share one tokenizer to be paired.
TEST_F(QwenTokenizer, OnePointFiveBSharesTheTokenizer) {
  auto big = load("qwen2.5-coder-1.5b-instruct.gguf");
  if (!big) GTEST_SKIP() << "qwen2.5-coder-1.5b-instruct.gguf not fetched (scripts/fetch_models.sh qwen2.5-coder-1.5b)";
  ASSERT_EQ(big->vocab_size(), tok_->vocab_size());
  for (TokenId id = 0; id < tok_->vocab_size(); ++id)
    ASSERT_EQ(big->token_string(id), tok_->token_string(id)) << "id " << id;
  for (const auto& t : fixture_["texts"])
    EXPECT_EQ(big->encode(t["text"].get<std::string>()), t["ids"].get<Tokens>());
}

// Optional: the same checks through from_hf_json on the tokenizer.json the reference script
// exports (make_tokenizer_fixtures.py --export-json <build dir>/hf_tokenizers). Not in git, so
// skipped when absent; SPECDEC_HF_TOKENIZERS overrides the folder.
TEST_F(QwenTokenizer, HfJsonLoaderAgreesWithGgufAndHF) {
  const char* env = std::getenv("SPECDEC_HF_TOKENIZERS");
  const std::string dir = (env ? std::string(env) : binary_dir() + "/hf_tokenizers") + "/qwen2.5-coder";
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
