#pragma once
// The byte-level BPE tokenizer behind Tokenizer::from_gguf / from_hf_json. Loaders fill a
// BpeSpec (vocabulary, merges, added tokens, pre-tokenizer, special ids); BpeTokenizer turns
// it into lookup tables once and then encodes/decodes.
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace specdec::tokenizer {

// Largest token id a tokenizer file may use (ids are dense, so this also bounds the vocabulary
// at 4,194,304 entries; real vocabularies have at most a few hundred thousand).
constexpr int64_t k_max_token_id = (int64_t(1) << 22) - 1;

// A token matched literally in the text before pre-tokenisation (HF "added_tokens").
struct AddedToken {
  std::string content;
  TokenId id = -1;
  bool special = true;       // skipped by decode(skip_special = true)
  bool lstrip = false;       // also swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
};

struct BpeSpec {
  std::string source;                     // file name, for error messages
  std::string merges_key = "merges";      // where merges came from, for error messages
  std::vector<std::string> tokens;        // id -> vocabulary string (byte-level spelling)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added;
  PreTokenizer pre;
  bool ignore_merges = false;  // a piece that is itself a vocabulary entry is one token
  TokenId bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_eos = false;
  std::vector<TokenId> extra_eos;  // end-of-turn ids from metadata
  std::string chat_template;       // Jinja source, only scanned for the default system prompt
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);

  Tokens encode(const std::string& text, bool add_special = true) const override;
  std::string decode(const Tokens& ids, bool skip_special = false) const override;
  std::string token_bytes(TokenId id) const override;
  const std::string& token_string(TokenId id) const override;
  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  TokenId bos_id() const override { return bos_; }
  std::vector<TokenId> eos_ids() const override { return eos_ids_; }
  bool is_special(TokenId id) const override;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt = true) const override;

  // Id of a vocabulary string or added token, -1 if absent.
  TokenId token_id(const std::string& token_string) const;
  // Default system prompt found in the chat template ("" if none).
  const std::string& default_system_prompt() const { return default_system_; }

  // Forgets cached per-piece results (for cold-cache benchmarks).
  void clear_cache() const;

  // BPE of one pre-tokenised piece (raw bytes), appended to out. Public for tests.
  void encode_piece(const std::string& piece, Tokens& out) const;

 private:
  struct Merge { int32_t rank; TokenId result; };
  static uint64_t pair_key(TokenId a, TokenId b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  void build_vocab(BpeSpec& spec);
  void build_merges(const BpeSpec& spec);
  void build_added(const BpeSpec& spec);
  void merge_symbols(Tokens& symbols) const;
  void encode_text(const std::string& text, Tokens& out) const;
  // Finds the leftmost-longest added token at or after `from`; returns false if none.
  bool find_added(const std::string& text, size_t from, size_t& begin, size_t& end,
                  TokenId& id) const;

  std::string source_;
  std::vector<std::string> tokens_;
  std::vector<std::string> bytes_;      // raw bytes per id
  std::vector<uint8_t> special_;        // per id
  std::unordered_map<std::string, TokenId> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  TokenId byte_id_[256];
  std::vector<AddedToken> added_;       // sorted longest first
  bool added_first_byte_[256] = {};
  PreTokenizer pre_;
  bool ignore_merges_ = false;
  TokenId bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::vector<TokenId> eos_ids_;
  std::string default_system_;

  // Pieces repeat a lot in real text ("Ġthe", "Ċ"), so their BPE result is cached.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, Tokens> cache_;
};

// The text of the default system message a ChatML template inserts when the conversation has
// none ("" if it inserts none): the body of the first string literal in the template that reads
// "<|im_start|>system\n<text><|im_end|>" with a non-empty text.
std::string extract_default_system_prompt(const std::string& chat_template);

}  // namespace specdec::tokenizer
