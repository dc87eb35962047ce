#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace specdec::tokenizer {
namespace {

constexpr size_t kMaxCacheEntries = 1 << 16;

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word_byte(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  return std::isalnum(u) || c == '_' || u >= 0x80;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : source_(spec.source), pre_(std::move(spec.pre)), ignore_merges_(spec.ignore_merges),
      bos_(spec.bos), eos_(spec.eos), unk_(spec.unk), add_bos_(spec.add_bos), add_eos_(spec.add_eos) {
  build_vocab(spec);
  build_merges(spec);
  build_added(spec);
  for (TokenId id : {bos_, eos_, unk_})
    SD_CHECK(id < int64_t(tokens_.size()), source_, ": special token id ", id,
             " out of range (vocabulary size ", tokens_.size(), ")");
  // EOS plus the end-of-turn markers of the chat formats we know, when present.
  auto add_eos_id = [&](TokenId id) {
    if (id >= 0 && id < int64_t(tokens_.size()) &&
        std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end())
      eos_ids_.push_back(id);
  };
  add_eos_id(eos_);
  for (TokenId id : spec.extra_eos) add_eos_id(id);
  for (const char* name : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>",
                           "<|end|>", "<end_of_turn>"})
    add_eos_id(token_id(name));
  default_system_ = extract_default_system_prompt(spec.chat_template);
}

void BpeTokenizer::build_vocab(BpeSpec& spec) {
  tokens_ = std::move(spec.tokens);
  SD_CHECK(int64_t(tokens_.size()) <= k_max_token_id + 1, source_, ": vocabulary of ", tokens_.size(),
           " tokens exceeds the limit of ", k_max_token_id + 1);
  // Ids are dense: an added token may extend the table by at most the number of added tokens.
  const int64_t bound = std::min<int64_t>(k_max_token_id + 1, int64_t(tokens_.size() + spec.added.size()));
  for (const AddedToken& a : spec.added) {
    SD_CHECK(a.id >= 0 && a.id < bound, source_, ": added token '", a.content, "' has id ", a.id,
             ", outside [0, ", bound, ") (", tokens_.size(), " vocabulary entries + ", spec.added.size(),
             " added tokens)");
    SD_CHECK(!a.content.empty(), source_, ": added token ", a.id, " has empty content");
    if (a.id >= int64_t(tokens_.size())) tokens_.resize(size_t(a.id) + 1);
    if (tokens_[size_t(a.id)].empty()) tokens_[size_t(a.id)] = a.content;
  }
  SD_CHECK(!tokens_.empty(), source_, ": empty vocabulary");
  special_.assign(tokens_.size(), 0);
  for (const AddedToken& a : spec.added) special_[size_t(a.id)] = a.special ? 1 : 0;

  vocab_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) vocab_.emplace(tokens_[id], TokenId(id));

  bytes_.resize(tokens_.size());
  std::vector<uint8_t> is_added(tokens_.size(), 0);
  for (const AddedToken& a : spec.added) is_added[size_t(a.id)] = 1;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    // Added tokens are stored as plain text; everything else in the byte-level spelling.
    // A token outside the byte alphabet decodes to its UTF-8 as is (HF does the same).
    if (is_added[id] || !symbols_to_bytes(tokens_[id], bytes_[id])) bytes_[id] = tokens_[id];
  }
  for (int b = 0; b < 256; ++b) byte_id_[b] = token_id(byte_to_symbol(uint8_t(b)));
}

void BpeTokenizer::build_merges(const BpeSpec& spec) {
  merges_.reserve(spec.merges.size() * 2);
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    TokenId a = token_id(left), b = token_id(right), m = token_id(left + right);
    SD_CHECK(a >= 0 && b >= 0 && m >= 0, source_, ": ", spec.merges_key, "[", rank, "] (merge ",
             rank, " '", left, " ", right, "') uses a token that is not in the vocabulary");
    merges_.emplace(pair_key(a, b), Merge{int32_t(rank), m});  // first (best) rank wins
  }
}

void BpeTokenizer::build_added(const BpeSpec& spec) {
  added_ = spec.added;
  // Longest first, so scanning candidates in order yields the longest match at a position.
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
  for (const AddedToken& a : added_) added_first_byte_[uint8_t(a.content[0])] = true;
}

TokenId BpeTokenizer::token_id(const std::string& s) const {
  auto it = vocab_.find(s);
  return it == vocab_.end() ? -1 : it->second;
}

bool BpeTokenizer::find_added(const std::string& text, size_t from, size_t& begin, size_t& end,
                              TokenId& id) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!added_first_byte_[uint8_t(text[i])]) continue;
    for (const AddedToken& a : added_) {
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      size_t b = i, e = i + a.content.size();
      if (a.single_word && ((b > 0 && is_word_byte(text[b - 1])) ||
                            (e < text.size() && is_word_byte(text[e]))))
        continue;
      if (a.lstrip)
        while (b > from && is_ascii_space(text[b - 1])) --b;
      if (a.rstrip)
        while (e < text.size() && is_ascii_space(text[e])) ++e;
      begin = b;
      end = e;
      id = a.id;
      return true;
    }
  }
  return false;
}

Tokens BpeTokenizer::encode(const std::string& text, bool add_special) const {
  Tokens out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  size_t pos = 0, begin = 0, end = 0;
  TokenId id = -1;
  // Added tokens are cut out first; only the text between them is pre-tokenised.
  while (find_added(text, pos, begin, end, id)) {
    encode_text(text.substr(pos, begin - pos), out);
    out.push_back(id);
    pos = end;
  }
  encode_text(text.substr(pos), out);
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

void BpeTokenizer::encode_text(const std::string& text, Tokens& out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces;
  pre_.split(text, pieces);  // without split steps the whole text is one piece
  for (const std::string& p : pieces) encode_piece(p, out);
}

void BpeTokenizer::encode_piece(const std::string& piece, Tokens& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  Tokens symbols;
  TokenId whole = ignore_merges_ ? token_id(bytes_to_symbols(piece)) : -1;
  if (whole >= 0) {
    symbols.push_back(whole);
  } else {
    symbols.reserve(piece.size());
    for (unsigned char c : piece) {
      // A byte missing from the vocabulary becomes UNK, or is dropped without one (as HF BPE).
      TokenId b = byte_id_[c] >= 0 ? byte_id_[c] : unk_;
      if (b >= 0) symbols.push_back(b);
    }
    merge_symbols(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(piece, std::move(symbols));
}

void BpeTokenizer::clear_cache() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.clear();
}

// Repeatedly applies the best-ranked merge (leftmost on ties) among adjacent symbols, using a
// min-heap of candidate pairs over a linked list: O(n log n) per piece instead of O(n^2).
void BpeTokenizer::merge_symbols(Tokens& symbols) const {
  const int n = int(symbols.size());
  if (n < 2) return;
  struct Node { TokenId id; int prev, next; };
  struct Cand {
    int32_t rank; int pos; TokenId left, right, result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Node> nodes(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) nodes[size_t(i)] = {symbols[size_t(i)], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int pos) {
    if (pos < 0 || nodes[size_t(pos)].next < 0) return;
    TokenId a = nodes[size_t(pos)].id, b = nodes[size_t(nodes[size_t(pos)].next)].id;
    auto it = merges_.find(pair_key(a, b));
    if (it != merges_.end()) heap.push({it->second.rank, pos, a, b, it->second.result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Node& left = nodes[size_t(c.pos)];
    // Stale candidates: a side was merged away since the pair was queued. Token ids only get
    // longer by merging, so matching ids prove the pair is still the same.
    if (left.id != c.left || left.next < 0 || nodes[size_t(left.next)].id != c.right) continue;
    Node& right = nodes[size_t(left.next)];
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) nodes[size_t(right.next)].prev = c.pos;
    push(left.prev);
    push(c.pos);
  }
  symbols.clear();
  for (int i = 0; i >= 0; i = nodes[size_t(i)].next) symbols.push_back(nodes[size_t(i)].id);
}

std::string BpeTokenizer::decode(const Tokens& ids, bool skip_special) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return utf8_lossy(bytes);
}

std::string BpeTokenizer::token_bytes(TokenId id) const {
  SD_CHECK(id >= 0 && id < int64_t(bytes_.size()), source_, ": token id ", id,
           " out of range [0, ", bytes_.size(), ")");
  return bytes_[size_t(id)];
}

const std::string& BpeTokenizer::token_string(TokenId id) const {
  SD_CHECK(id >= 0 && id < int64_t(tokens_.size()), source_, ": token id ", id,
           " out of range [0, ", tokens_.size(), ")");
  return tokens_[size_t(id)];
}

bool BpeTokenizer::is_special(TokenId id) const {
  return id >= 0 && id < int64_t(special_.size()) && special_[size_t(id)] != 0;
}

std::string BpeTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt) const {
  std::string out;
  // SmolLM2 and Qwen2.5 templates insert their default system turn when the first message
  // is not a system message.
  if (!messages.empty() && messages[0].role != "system" && !default_system_.empty())
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  for (const ChatMessage& m : messages)
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace specdec::tokenizer
