// libFuzzer target for Tokenizer::from_hf_json (src/tokenizer/load_hf_json.cpp and the
// BpeTokenizer it builds). The input is a tokenizer.json, optionally followed by a NUL byte and
// a tokenizer_config.json (written next to it, as the loader looks for one there).
// Properties: loading either succeeds or throws specdec::Error (anything else escapes and is a
// finding); a loaded tokenizer encodes a few texts to ids inside its vocabulary, and decodes,
// spells and classifies every id without throwing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

namespace {

const specdec::fuzz::ScratchDir& scratch() {
  static const specdec::fuzz::ScratchDir dir;
  return dir;
}

// Texts that reach added tokens (lstrip/rstrip/single_word), digits, spaces, non-ASCII and
// invalid UTF-8.
const char* const kProbes[] = {
    "Hello world 123 <s> </s>  [word] x[word] <|im_start|>user\nhi<|im_end|>\n",
    "  caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd 3.14 x.y.z\t\r\n",
    "\xff\xfe\xc3(\x80 the the",
};

void exercise(const specdec::tokenizer::Tokenizer& tok) {
  using specdec::fuzz::property_failed;
  const int64_t n = tok.vocab_size();
  if (n <= 0) property_failed("loaded tokenizer has vocab_size " + std::to_string(n));
  for (const char* text : kProbes) {
    for (bool special : {false, true}) {
      const auto ids = tok.encode(text, special);
      for (auto id : ids)
        if (id < 0 || id >= n)
          property_failed("encode produced id " + std::to_string(id) + " outside [0, " + std::to_string(n) + ")");
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
    }
  }
  // Every id of a (small: the fuzzer's inputs are a few KB) vocabulary.
  for (int64_t id = 0; id < n && id < 4096; ++id) {
    (void)tok.token_bytes(static_cast<specdec::TokenId>(id));
    (void)tok.token_string(static_cast<specdec::TokenId>(id));
    (void)tok.is_special(static_cast<specdec::TokenId>(id));
  }
  for (auto id : tok.eos_ids())
    if (id < 0 || id >= n) property_failed("eos id " + std::to_string(id) + " outside the vocabulary");
  if (tok.bos_id() >= n) property_failed("bos id " + std::to_string(tok.bos_id()) + " outside the vocabulary");
  (void)tok.apply_chat_template({{"user", "hi"}, {"assistant", "hello"}}, true);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("SPECDEC_LOG", "error", 1);  // no "NFC normalizer ignored" warning per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = specdec::fuzz::split_nul(data, size);
  const std::string json_path = scratch().file("tokenizer.json");
  const std::string config_path = scratch().file("tokenizer_config.json");
  specdec::fuzz::write_file(json_path, parts[0]);
  if (parts.size() > 1) {
    specdec::fuzz::write_file(config_path, parts[1]);
  } else {
    std::remove(config_path.c_str());
  }
  std::shared_ptr<specdec::tokenizer::Tokenizer> tok;
  try {
    tok = specdec::tokenizer::Tokenizer::from_hf_json(json_path);
  } catch (const specdec::Error&) {
    return 0;  // rejected with a message: fine
  }
  try {
    exercise(*tok);
  } catch (const specdec::Error& e) {
    // A tokenizer the loader accepted must work on any text.
    specdec::fuzz::property_failed(std::string("a loaded tokenizer threw: ") + e.what());
  }
  return 0;
}
