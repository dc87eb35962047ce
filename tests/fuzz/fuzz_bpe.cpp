// libFuzzer target for the byte-level BPE encoder/decoder on arbitrary bytes, with two real
// tokenizers cut from the SmolLM2 and Qwen2.5 vocabularies (tests/fuzz/tokenizers/, written by
// make_seeds.py: the 256 byte tokens, the special tokens and the first 1500 merges, with each
// model's own pre-tokenizer). For every input x and each tokenizer:
//   - every id is inside the vocabulary;
//   - the token bytes concatenate back to x, minus the bytes the vocabulary has no token for
//     (SmolLM2 lacks 21 of them; HF drops them too): lossless on any bytes, valid UTF-8 or not;
//   - decode(encode(x)) == x for valid UTF-8 x (same minus-missing-bytes rule);
//   - encoding again (now from the piece cache) gives the same ids;
//   - BPE of x as one piece equals a naive reference written here (repeatedly merge the
//     lowest-ranked adjacent pair, leftmost first), so the heap-based merge loop is checked
//     against the definition, not just against itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_common.h"
#include "tests/support/paths.h"
#include "tokenizer/bpe_tokenizer.h"

namespace {

using specdec::TokenId;
using specdec::Tokens;
using specdec::fuzz::property_failed;
using specdec::tokenizer::BpeTokenizer;

// GPT-2's byte -> printable code point table, written out again (not taken from the code
// under test): printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards.
std::string byte_symbol(int b) {
  int cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  if (!printable) {
    int extra = 0;
    for (int k = 0; k < b; ++k)
      if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174 && k <= 255))) ++extra;
    cp = 256 + extra;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

struct Subject {
  std::string name;
  std::shared_ptr<BpeTokenizer> tok;
  TokenId byte_token[256];                                   // -1: no token for this byte
  std::unordered_map<uint64_t, std::pair<int32_t, TokenId>> merges;  // (left, right) -> rank, result
  bool ignore_merges = false;
};

uint64_t pair_key(TokenId a, TokenId b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

Subject load(const std::string& name, const std::string& path) {
  Subject s;
  s.name = name;
  auto base = specdec::tokenizer::Tokenizer::from_hf_json(path);
  s.tok = std::dynamic_pointer_cast<BpeTokenizer>(base);
  if (!s.tok) property_failed(path + ": not a BpeTokenizer");
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  const auto& model = doc.at("model");
  s.ignore_merges = model.value("ignore_merges", false);
  std::unordered_map<std::string, TokenId> vocab;
  for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it)
    vocab[it.key()] = it.value().get<TokenId>();
  auto id = [&](const std::string& t) {
    auto it = vocab.find(t);
    return it == vocab.end() ? TokenId(-1) : it->second;
  };
  for (int b = 0; b < 256; ++b) s.byte_token[b] = id(byte_symbol(b));
  const auto& merges = model.at("merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string l = merges[rank][0], r = merges[rank][1];
    s.merges.emplace(pair_key(id(l), id(r)), std::make_pair(int32_t(rank), id(l + r)));  // first rank wins
  }
  return s;
}

std::vector<Subject>& subjects() {
  static std::vector<Subject> all = [] {
    std::vector<Subject> v;
    const std::string dir = specdec::testing_support::source_dir() + "/tests/fuzz/tokenizers/";
    v.push_back(load("smollm2_cut", dir + "smollm2_cut.json"));
    v.push_back(load("qwen2_cut", dir + "qwen2_cut.json"));
    return v;
  }();
  return all;
}

// The definition of BPE on one piece.
Tokens reference_bpe(const Subject& s, const std::string& piece) {
  if (s.ignore_merges) {
    std::string spelled;
    for (unsigned char c : piece) spelled += byte_symbol(c);
    const TokenId whole = s.tok->token_id(spelled);
    if (whole >= 0) return {whole};
  }
  Tokens sym;
  for (unsigned char c : piece)
    if (s.byte_token[c] >= 0) sym.push_back(s.byte_token[c]);
  for (;;) {
    size_t best = sym.size();
    int32_t best_rank = INT32_MAX;
    TokenId result = -1;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = s.merges.find(pair_key(sym[i], sym[i + 1]));
      if (it != s.merges.end() && it->second.first < best_rank) {
        best = i;
        best_rank = it->second.first;
        result = it->second.second;
      }
    }
    if (best == sym.size()) return sym;
    sym[best] = result;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

std::string show(const Tokens& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

void check(const Subject& s, const std::string& x) {
  const BpeTokenizer& tok = *s.tok;
  const Tokens ids = tok.encode(x, false);
  std::string bytes;
  for (TokenId id : ids) {
    if (id < 0 || id >= tok.vocab_size())
      property_failed(s.name + ": encode produced id " + std::to_string(id) + " outside the vocabulary");
    bytes += tok.token_bytes(id);
  }
  std::string expected;  // x without the bytes that have no token
  for (unsigned char c : x)
    if (s.byte_token[c] >= 0) expected.push_back(static_cast<char>(c));
  if (bytes != expected)
    property_failed(s.name + ": token bytes of " + show(ids) + " do not give the input back (" +
                    std::to_string(bytes.size()) + " vs " + std::to_string(expected.size()) + " bytes)");
  if (specdec::fuzz::valid_utf8(expected) && tok.decode(ids, false) != expected)
    property_failed(s.name + ": decode(encode(x)) != x for valid UTF-8 x, ids " + show(ids));
  if (tok.encode(x, false) != ids) property_failed(s.name + ": encoding twice gave different ids");
  if (x.size() <= 256) {
    Tokens piece;
    tok.encode_piece(x, piece);
    const Tokens want = reference_bpe(s, x);
    if (piece != want)
      property_failed(s.name + ": BPE of the input as one piece is " + show(piece) + ", the reference gives " +
                      show(want));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("SPECDEC_LOG", "error", 1);  // the Qwen2 tokenizer's NFC normalizer warns on load
  (void)subjects();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string x(reinterpret_cast<const char*>(data), size);
  for (const Subject& s : subjects()) {
    try {
      check(s, x);
    } catch (const specdec::Error& e) {
      // encode/decode of a loaded tokenizer has no error to report on any input.
      property_failed(s.name + ": threw " + e.what());
    }
  }
  return 0;
}
