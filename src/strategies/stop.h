#pragma once
// Stop handling shared by every strategy: EOS ids, max_new_tokens, stop strings matched on
// the decoded text across token boundaries (cut from the output), a wall-clock timeout, and
// incremental detokenisation for streaming. Strategies push tokens one at a time, so a
// speculative block is cut exactly where token-by-token decoding would have stopped.
#include <optional>
#include <string>

#include "core/timer.h"
#include "strategies/strategy.h"

namespace specdec::strategies {

class StopTracker {
 public:
  // tokenizer may be null (tiny random models): then text stays empty and stop strings
  // are rejected.
  StopTracker(const StopCriteria& stop, const tokenizer::Tokenizer* tokenizer,
              const TokenCallback* on_token);

  // Appends one generated token. Returns true when generation must end (finish() says why);
  // further pushes are an error.
  bool push(TokenId token);
  // Checked by strategies once per step (a forward is never interrupted).
  bool timed_out();
  bool done() const { return finish_.has_value(); }
  FinishReason finish() const { return finish_.value_or(FinishReason::length); }

  // Streams tokens pushed since the last flush and the text that is final so far (text that
  // might still become part of a stop string, or an incomplete UTF-8 sequence, is held back
  // until done()).
  void flush();

  const Tokens& tokens() const { return tokens_; }
  // Decoded text of the generated tokens (special tokens skipped), stop string cut.
  std::string text() const;
  int64_t n_tokens() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  bool is_eos(TokenId t) const;
  void check_stop_strings(size_t old_size);
  size_t final_text_end() const;

  const StopCriteria& stop_;
  const tokenizer::Tokenizer* tokenizer_;
  const TokenCallback* on_token_;
  Stopwatch clock_;
  Tokens tokens_;
  std::string bytes_;        // concatenated token bytes (special tokens skipped)
  size_t cut_ = std::string::npos;  // stop string start in bytes_
  size_t n_tokens_streamed_ = 0;
  size_t n_bytes_streamed_ = 0;
  size_t max_stop_len_ = 0;
  std::optional<FinishReason> finish_;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary.
size_t utf8_complete_prefix(const std::string& s, size_t end);

}  // namespace specdec::strategies
