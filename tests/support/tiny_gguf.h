#pragma once
// A tiny Llama as a GGUF file with a byte-level tokenizer (256 byte tokens, no merges), which
// every CLI command takes as --model PATH (generate, run, trace, tokenize, train-drafter): the
// fast tier's stand-in for SmolLM2 in tests that drive build/specdec. F32 tensors of
// pseudo-random values (a fixed LCG: the same bytes on every machine), uniform in [-0.5, 0.5)
// unless scaled.
//
// The defaults (2 layers, d_model 32, d_ff 64, 4 heads / 2 KV heads, n_ctx 512) are a model the
// CLI tests use as a real one: d_model and d_ff are multiples of 32, so --dtype / --draft-dtype
// q4_1 can requantise every row (Q4_1 blocks of 32); an untied output head scaled by
// output_scale makes the logits peaked (top-1 ahead of top-2 by a few logits, so greedy has
// few near-ties that rounding differences between decode and verify forwards could flip); and
// layer_scale keeps the model learnable (below).
// chat adds ChatML's <|im_start|> / <|im_end|> as control tokens (ids 256, 257; eos
// <|im_end|>) and a ChatML tokenizer.chat_template, for --chat and train-drafter --data chat.
// merges adds BPE merges, each pair's concatenation a token after those (multi-byte tokens, for
// tests where a text has several tokenisations); none by default.
//
// The metadata overrides write a value other than the tensors' (crafted bad files:
// tests/unit/test_bad_inputs.cpp, whose model is 1 layer, d_model 8, d_ff 16, 2 heads, tied,
// layer_scale 1: the bytes this writer's first version wrote).
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/gguf_writer.h"
#include "tokenizer/byte_level.h"

namespace specdec::testing {

struct TinyGgufOptions {
  // The tensors.
  int64_t n_layers = 2, d_model = 32, d_ff = 64, n_heads = 4, n_kv_heads = 2;
  uint32_t n_ctx = 512;
  uint32_t seed = 12345;     // the LCG's start
  // The layers' weight matrices: random values times this. At 0.3 the embedding still counts
  // beside the layers' outputs in the residual stream, so the next token depends on the last
  // tokens more than on chaos: a head trained on the model's own text drafts what it generates
  // (at 1 a trained EAGLE head's held-out top-1 was 0.11, at 0.3 0.70).
  float layer_scale = 0.3f;
  float output_scale = 4;    // > 0: an untied output.weight of random values times this; 0: tied to token_embd
  bool chat = false;         // <|im_start|> <|im_end|> control tokens, eos, ChatML chat template
  float output_norm_value = 1.0f;  // every value of output_norm.weight (NaN / inf poisons every logit)
  // Metadata written instead of the tensors' shape (unset: the shape).
  std::optional<uint32_t> block_count, embedding_length, head_count, head_count_kv;
  float rms_eps = 1e-5f, rope_base = 10000.0f;
  int64_t bos_id = -1;            // tokenizer.ggml.bos_token_id, written when >= 0
  uint64_t huge_string_len = 0;   // > 0: general.name claims this length (and the file ends)
  uint32_t vocab_type = 8;        // element type of tokenizer.ggml.tokens (8: strings; else integers)
  // BPE merges in rank order, as raw bytes (left, right): token left+right is added after the
  // bytes and the chat tokens, with the next id. Each side must be a byte or an earlier merge's token.
  std::vector<std::pair<std::string, std::string>> merges;
};

// The file's bytes.
inline std::vector<uint8_t> tiny_gguf(const TinyGgufOptions& o = {}) {
  const uint64_t d = uint64_t(o.d_model), ff = uint64_t(o.d_ff);
  const uint64_t head_dim = o.n_heads > 0 ? d / uint64_t(o.n_heads) : d;
  const uint64_t q_dim = head_dim * uint64_t(o.n_heads), kv_dim = head_dim * uint64_t(o.n_kv_heads);
  const int64_t n_bytes = 256, n_vocab = n_bytes + (o.chat ? 2 : 0) + static_cast<int64_t>(o.merges.size());
  const auto symbols = [](const std::string& raw) {  // raw bytes as the vocabulary writes them
    std::string out;
    for (const char c : raw) out += specdec::tokenizer::byte_to_symbol(uint8_t(c));
    return out;
  };
  struct T {
    std::string name;
    std::vector<uint64_t> ne;  // GGUF order: ne[0] = columns
    float scale;               // > 0: pseudo-random in [-0.5, 0.5) times scale; else every value is `fill`
    float fill;
  };
  std::vector<T> tensors = {{"token_embd.weight", {d, uint64_t(n_vocab)}, 1.0f, 0},
                            {"output_norm.weight", {d}, 0, o.output_norm_value}};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    tensors.push_back({b + "attn_q.weight", {d, q_dim}, o.layer_scale, 0});
    tensors.push_back({b + "attn_k.weight", {d, kv_dim}, o.layer_scale, 0});
    tensors.push_back({b + "attn_v.weight", {d, kv_dim}, o.layer_scale, 0});
    tensors.push_back({b + "attn_output.weight", {q_dim, d}, o.layer_scale, 0});
    tensors.push_back({b + "attn_norm.weight", {d}, 0, 1.0f});
    tensors.push_back({b + "ffn_norm.weight", {d}, 0, 1.0f});
    tensors.push_back({b + "ffn_gate.weight", {d, ff}, o.layer_scale, 0});
    tensors.push_back({b + "ffn_up.weight", {d, ff}, o.layer_scale, 0});
    tensors.push_back({b + "ffn_down.weight", {ff, d}, o.layer_scale, 0});
  }
  if (o.output_scale > 0) tensors.push_back({"output.weight", {d, uint64_t(n_vocab)}, o.output_scale, 0});

  GgufWriter w;
  w.b = {'G', 'G', 'U', 'F'};
  w.put<uint32_t>(3);
  w.put<uint64_t>(tensors.size());
  const bool typed = o.chat || !o.merges.empty();  // writes tokenizer.ggml.token_type
  const uint64_t n_kv = 14 + (o.bos_id >= 0) + (o.huge_string_len > 0) + (o.chat ? 2 : 0) + (typed ? 1 : 0);
  w.put<uint64_t>(n_kv);
  w.key("general.architecture", 8); w.str("llama");
  w.key("llama.block_count", 4); w.put<uint32_t>(o.block_count.value_or(uint32_t(o.n_layers)));
  w.key("llama.embedding_length", 4); w.put<uint32_t>(o.embedding_length.value_or(uint32_t(d)));
  w.key("llama.feed_forward_length", 4); w.put<uint32_t>(uint32_t(ff));
  w.key("llama.attention.head_count", 4); w.put<uint32_t>(o.head_count.value_or(uint32_t(o.n_heads)));
  w.key("llama.attention.head_count_kv", 4); w.put<uint32_t>(o.head_count_kv.value_or(uint32_t(o.n_kv_heads)));
  w.key("llama.attention.layer_norm_rms_epsilon", 6); w.put<float>(o.rms_eps);
  w.key("llama.rope.freq_base", 6); w.put<float>(o.rope_base);
  w.key("llama.context_length", 4); w.put<uint32_t>(o.n_ctx);
  w.key("tokenizer.ggml.model", 8); w.str("gpt2");
  w.key("tokenizer.ggml.pre", 8); w.str("gpt2");
  w.key("tokenizer.ggml.tokens", 9); w.put<uint32_t>(o.vocab_type); w.put<uint64_t>(uint64_t(n_vocab));
  for (int b = 0; b < n_bytes; ++b) {
    if (o.vocab_type == 8) w.str(specdec::tokenizer::byte_to_symbol(uint8_t(b)));
    else w.put<uint32_t>(uint32_t(b));  // tokens as integers: a well-formed array of the wrong type
  }
  if (o.chat) {
    if (o.vocab_type == 8) { w.str("<|im_start|>"); w.str("<|im_end|>"); }
    else { w.put<uint32_t>(256); w.put<uint32_t>(257); }
  }
  for (const auto& [left, right] : o.merges) w.str(symbols(left + right));
  w.key("tokenizer.ggml.merges", 9); w.put<uint32_t>(8); w.put<uint64_t>(o.merges.size());
  for (const auto& [left, right] : o.merges) w.str(symbols(left) + " " + symbols(right));
  w.key("tokenizer.ggml.add_bos_token", 7); w.put<uint8_t>(0);
  if (o.bos_id >= 0) { w.key("tokenizer.ggml.bos_token_id", 4); w.put<uint32_t>(uint32_t(o.bos_id)); }
  if (typed) {
    w.key("tokenizer.ggml.token_type", 9); w.put<uint32_t>(5); w.put<uint64_t>(uint64_t(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i)
      w.put<int32_t>(o.chat && (i == n_bytes || i == n_bytes + 1) ? 3 : 1);  // control; normal
  }
  if (o.chat) {
    w.key("tokenizer.ggml.eos_token_id", 4); w.put<uint32_t>(257);
    w.key("tokenizer.chat_template", 8);
    w.str("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}");
  }
  if (o.huge_string_len > 0) { w.key("general.name", 8); w.put<uint64_t>(o.huge_string_len); }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const T& t : tensors) {
    uint64_t n = 1;
    for (uint64_t e : t.ne) n *= e;
    offsets.push_back(offset);
    w.str(t.name);
    w.put<uint32_t>(uint32_t(t.ne.size()));
    for (uint64_t e : t.ne) w.put<uint64_t>(e);
    w.put<uint32_t>(0);  // F32
    w.put<uint64_t>(offset);
    offset += (n * 4 + 31) / 32 * 32;
  }
  w.pad_to(32);
  const size_t data_start = w.b.size();
  uint32_t state = o.seed;
  for (size_t k = 0; k < tensors.size(); ++k) {
    w.b.resize(data_start + offsets[k]);
    uint64_t n = 1;
    for (uint64_t e : tensors[k].ne) n *= e;
    for (uint64_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;  // advanced for filled tensors too
      const float v = tensors[k].scale > 0 ? (float(state >> 8) / float(1 << 24) - 0.5f) * tensors[k].scale
                                           : tensors[k].fill;
      w.put<float>(v);
    }
  }
  return w.b;
}

// Writes tiny_gguf(o) to path (its folder must exist); returns path.
inline std::string write_tiny_gguf(const std::string& path, const TinyGgufOptions& o = {}) {
  const std::vector<uint8_t> b = tiny_gguf(o);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  return path;
}

}  // namespace specdec::testing
