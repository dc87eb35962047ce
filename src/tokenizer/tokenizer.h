#pragma once
// Byte-level BPE tokenizer (GPT-2 / Llama-3 / SmolLM2 / Qwen2 style), built from GGUF
// metadata (tokenizer.ggml.*) or a Hugging Face tokenizer.json. Matches HF `tokenizers`
// token for token.
#include <memory>
#include <string>
#include <vector>

#include "core/types.h"

namespace specdec::io { class GgufFile; }

namespace specdec::tokenizer {

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  static std::shared_ptr<Tokenizer> from_gguf(const io::GgufFile& gguf);
  static std::shared_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json_path);

  // Special/added tokens written literally in `text` (e.g. "<|im_start|>") become their ids.
  // add_bos prepends BOS when the model's metadata asks for it (tokenizer.ggml.add_bos_token).
  virtual Tokens encode(const std::string& text, bool add_special = true) const = 0;
  virtual std::string decode(const Tokens& ids, bool skip_special = false) const = 0;
  // Raw bytes of one token (byte-level BPE decoded to bytes; may be a partial UTF-8 sequence).
  virtual std::string token_bytes(TokenId id) const = 0;
  // The vocabulary string of a token as stored (e.g. "Ġthe").
  virtual const std::string& token_string(TokenId id) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;                 // -1 if none
  virtual std::vector<TokenId> eos_ids() const = 0;   // EOS and end-of-turn ids
  virtual bool is_special(TokenId id) const = 0;

  // ChatML (<|im_start|>role\ncontent<|im_end|>\n ...), as the instruct models' templates.
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt = true) const = 0;
};

}  // namespace specdec::tokenizer
