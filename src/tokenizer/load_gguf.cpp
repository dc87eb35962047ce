// Tokenizer::from_gguf: builds the byte-level BPE from llama.cpp's tokenizer.ggml.* metadata.
// Kept in its own file so programs that never call it do not need the GGUF reader.
#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace specdec::tokenizer {
namespace {

// llama.cpp token types (tokenizer.ggml.token_type).
constexpr int64_t kControl = 3, kUserDefined = 4;

bool in_byte_alphabet(const std::string& s) {
  std::string ignored;
  return symbols_to_bytes(s, ignored);
}

std::vector<std::pair<std::string, std::string>> read_merges(const io::GgufFile& gguf) {
  const char* key = "tokenizer.ggml.merges";
  std::vector<std::string> lines = gguf.get_string_array(key);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    // Byte-level tokens never contain a raw space, so "Ġ t" has exactly one separator.
    size_t sp = lines[i].find(' ');
    SD_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < lines[i].size() &&
                 lines[i].find(' ', sp + 1) == std::string::npos,
             gguf.path(), ": ", key, "[", i, "] = '", lines[i], "' is not 'left right'");
    merges.emplace_back(lines[i].substr(0, sp), lines[i].substr(sp + 1));
  }
  return merges;
}

// Control tokens become special added tokens and user-defined ones plain added tokens, both
// matched literally in text, as llama.cpp and transformers' GGUF loader do. A control token
// spelled outside the byte alphabet is a mislabelled vocabulary entry; transformers skips it.
void read_added(const io::GgufFile& gguf, BpeSpec& spec) {
  const char* key = "tokenizer.ggml.token_type";
  if (!gguf.has(key)) return;
  std::vector<int64_t> types = gguf.get_int_array(key);
  SD_CHECK(types.size() == spec.tokens.size(), gguf.path(), ": ", key, " has ", types.size(),
           " entries but tokenizer.ggml.tokens has ", spec.tokens.size());
  for (size_t id = 0; id < types.size(); ++id) {
    std::string& tok = spec.tokens[id];
    bool control = types[id] == kControl && in_byte_alphabet(tok);
    bool user = types[id] == kUserDefined;
    if ((control || user) && !tok.empty()) {
      AddedToken a;
      a.content = tok;
      a.id = TokenId(id);
      a.special = control;
      spec.added.push_back(a);
    } else if (!in_byte_alphabet(tok)) {
      // A plain token written in raw text: respell it so BPE can reach it (as transformers).
      tok = bytes_to_symbols(tok);
    }
  }
}

TokenId read_id(const io::GgufFile& gguf, const std::string& key, size_t n_vocab) {
  int64_t id = gguf.get_int_or(key, -1);
  SD_CHECK(id >= -1 && id < int64_t(n_vocab), gguf.path(), ": ", key, " = ", id,
           " is outside the vocabulary of ", n_vocab, " tokens");
  return TokenId(id);
}

}  // namespace

std::shared_ptr<Tokenizer> Tokenizer::from_gguf(const io::GgufFile& gguf) {
  const std::string& src = gguf.path();
  std::string model = gguf.get_string_or("tokenizer.ggml.model", "");
  SD_CHECK(model == "gpt2", src, ": tokenizer.ggml.model = '", model,
           "' is not supported (only 'gpt2', byte-level BPE)");
  BpeSpec spec;
  spec.source = src;
  spec.tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  SD_CHECK(!spec.tokens.empty(), src, ": tokenizer.ggml.tokens is empty");
  spec.merges = read_merges(gguf);
  spec.merges_key = "tokenizer.ggml.merges";
  read_added(gguf, spec);
  std::string pre = gguf.get_string_or("tokenizer.ggml.pre", "gpt2");
  spec.pre = PreTokenizer::for_gguf_pre(pre, src + ": tokenizer.ggml.pre", spec.ignore_merges);
  const size_t n = spec.tokens.size();
  spec.bos = read_id(gguf, "tokenizer.ggml.bos_token_id", n);
  spec.eos = read_id(gguf, "tokenizer.ggml.eos_token_id", n);
  // Byte-level vocabularies cover every byte, so UNK is never needed while encoding.
  spec.add_bos = gguf.get_bool_or("tokenizer.ggml.add_bos_token", false);
  spec.add_eos = gguf.get_bool_or("tokenizer.ggml.add_eos_token", false);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    TokenId id = read_id(gguf, key, n);
    if (id >= 0) spec.extra_eos.push_back(id);
  }
  spec.chat_template = gguf.get_string_or("tokenizer.chat_template", "");
  return std::make_shared<BpeTokenizer>(std::move(spec));
}

}  // namespace specdec::tokenizer
