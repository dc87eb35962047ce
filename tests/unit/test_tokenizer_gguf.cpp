// Tokenizer::from_gguf on tiny in-memory GGUF files: llama.cpp's tokenizer.ggml.* keys
// (tokens, token types, "left right" merges, pre-tokenizer name, special ids, chat template)
// and errors naming the file and key for malformed metadata.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"

namespace specdec::tokenizer {
namespace {

// Minimal GGUF v3 writer: header and metadata only (no tensors).
class GgufBuilder {
 public:
  void str(const std::string& key, const std::string& v) { head(key, 8); text(v); ++n_kv_; }
  void u32(const std::string& key, uint32_t v) { head(key, 4); pod(v); ++n_kv_; }
  void boolean(const std::string& key, bool v) { head(key, 7); pod(uint8_t(v)); ++n_kv_; }
  void strs(const std::string& key, const std::vector<std::string>& v) {
    head(key, 9); pod(uint32_t(8)); pod(uint64_t(v.size()));
    for (const auto& s : v) text(s);
    ++n_kv_;
  }
  void i32s(const std::string& key, const std::vector<int32_t>& v) {
    head(key, 9); pod(uint32_t(5)); pod(uint64_t(v.size()));
    for (int32_t x : v) pod(x);
    ++n_kv_;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    auto put = [&](auto v) { const auto* p = reinterpret_cast<const uint8_t*>(&v); out.insert(out.end(), p, p + sizeof v); };
    put(uint32_t(3));
    put(uint64_t(0));
    put(uint64_t(n_kv_));
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  template <class T> void pod(T v) { const auto* p = reinterpret_cast<const uint8_t*>(&v); body_.insert(body_.end(), p, p + sizeof v); }
  void text(const std::string& s) { pod(uint64_t(s.size())); body_.insert(body_.end(), s.begin(), s.end()); }
  void head(const std::string& key, uint32_t type) { text(key); pod(type); }
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

// The byte-level vocabulary of a toy model: a, b, c, Ġ, ab, Ġab, <|im_start|>, <|im_end|>, <x>.
struct Toy {
  std::string model = "gpt2", pre = "gpt2";
  std::vector<std::string> tokens = {"a", "b", "c", "\xC4\xA0", "ab", "\xC4\xA0" "ab", "<|im_start|>", "<|im_end|>", "<x>"};
  std::vector<int32_t> types = {1, 1, 1, 1, 1, 1, 3, 3, 4};
  std::vector<std::string> merges = {"a b", "\xC4\xA0 ab"};
  uint32_t eos = 7;
  std::string chat_template = "{{ '<|im_start|>system\\nToy default.<|im_end|>\\n' }}";

  std::vector<uint8_t> build() const {
    GgufBuilder g;
    g.str("general.architecture", "llama");
    g.str("tokenizer.ggml.model", model);
    g.str("tokenizer.ggml.pre", pre);
    g.strs("tokenizer.ggml.tokens", tokens);
    g.i32s("tokenizer.ggml.token_type", types);
    g.strs("tokenizer.ggml.merges", merges);
    g.u32("tokenizer.ggml.bos_token_id", 6);
    g.u32("tokenizer.ggml.eos_token_id", eos);
    g.boolean("tokenizer.ggml.add_bos_token", false);
    g.str("tokenizer.chat_template", chat_template);
    return g.bytes();
  }
};

std::shared_ptr<Tokenizer> load(const std::vector<uint8_t>& bytes) {
  auto file = io::GgufFile::parse(bytes.data(), bytes.size(), "toy.gguf");
  return Tokenizer::from_gguf(*file);
}

TEST(FromGguf, ReadsVocabularyMergesAndSpecialTokens) {
  auto bytes = Toy().build();
  auto tok = load(bytes);
  EXPECT_EQ(tok->vocab_size(), 9);
  EXPECT_EQ(tok->encode("ab ab"), (Tokens{4, 5}));
  EXPECT_EQ(tok->encode("<|im_start|>abc<x>"), (Tokens{6, 4, 2, 8}));
  EXPECT_EQ(tok->bos_id(), 6);
  EXPECT_EQ(tok->eos_ids(), Tokens{7});
  EXPECT_TRUE(tok->is_special(6));
  EXPECT_FALSE(tok->is_special(8));  // user-defined: matched literally, but not special
  EXPECT_EQ(tok->decode({6, 4, 8}, /*skip_special=*/true), "ab<x>");
  EXPECT_EQ(tok->apply_chat_template({{"user", "ab"}}, false),
            "<|im_start|>system\nToy default.<|im_end|>\n<|im_start|>user\nab<|im_end|>\n");
}

void expect_error(const Toy& toy, const std::string& needle) {
  auto bytes = toy.build();
  try {
    load(bytes);
    ADD_FAILURE() << "expected specdec::Error mentioning " << needle;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("toy.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(FromGguf, MalformedMetadataNamesFileAndKey) {
  Toy t;
  t.model = "llama";
  expect_error(t, "tokenizer.ggml.model");
  t = Toy();
  t.pre = "mystery";
  expect_error(t, "tokenizer.ggml.pre");
  t = Toy();
  t.merges.push_back("abc");
  expect_error(t, "tokenizer.ggml.merges[2]");
  t = Toy();
  t.merges.push_back("a q");
  expect_error(t, "tokenizer.ggml.merges[2] (merge 2 'a q')");
  t = Toy();
  t.types.pop_back();
  expect_error(t, "tokenizer.ggml.token_type");
  t = Toy();
  t.eos = 99;
  expect_error(t, "tokenizer.ggml.eos_token_id");
}

}  // namespace
}  // namespace specdec::tokenizer
