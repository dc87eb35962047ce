#include "strategies/stop.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace specdec::strategies {

size_t utf8_complete_prefix(const std::string& s, size_t end) {
  // Walk back over at most 3 continuation bytes to the lead byte of the last character and
  // keep that character only if all of its bytes are present.
  size_t i = end;
  int n_cont = 0;
  while (i > 0 && n_cont < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) { --i; ++n_cont; }
  if (i == 0) return n_cont == 0 ? 0 : end;  // only continuation bytes: not UTF-8, pass through
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  int need = 0;
  if (lead >= 0xF0) need = 3;
  else if (lead >= 0xE0) need = 2;
  else if (lead >= 0xC0) need = 1;
  else return end;  // ASCII lead: everything complete
  return n_cont >= need ? end : i - 1;
}

StopTracker::StopTracker(const StopCriteria& stop, const tokenizer::Tokenizer* tokenizer,
                         const TokenCallback* on_token)
    : stop_(stop), tokenizer_(tokenizer), on_token_(on_token) {
  SD_CHECK(stop.max_new_tokens >= 0, "max_new_tokens must be >= 0, got ", stop.max_new_tokens);
  SD_CHECK(stop.timeout_s >= 0, "timeout must be >= 0 s, got ", stop.timeout_s);
  for (const auto& s : stop.stop_strings) {
    SD_CHECK(!s.empty(), "stop strings must not be empty");
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
  SD_CHECK(stop.stop_strings.empty() || tokenizer != nullptr,
           "stop strings need a tokenizer (this model has none)");
  if (stop.max_new_tokens == 0) finish_ = FinishReason::length;
}

bool StopTracker::is_eos(TokenId t) const {
  return std::find(stop_.eos_ids.begin(), stop_.eos_ids.end(), t) != stop_.eos_ids.end();
}

bool StopTracker::push(TokenId token) {
  SD_CHECK(!done(), "StopTracker: token pushed after generation finished");
  tokens_.push_back(token);
  const size_t old_size = bytes_.size();
  if (tokenizer_ && !tokenizer_->is_special(token)) bytes_ += tokenizer_->token_bytes(token);
  if (is_eos(token)) {
    finish_ = FinishReason::eos;
  } else {
    check_stop_strings(old_size);
    if (!done() && static_cast<int64_t>(tokens_.size()) >= stop_.max_new_tokens) finish_ = FinishReason::length;
  }
  return done();
}

// A stop string can only newly appear in a window that overlaps the bytes just added.
void StopTracker::check_stop_strings(size_t old_size) {
  if (stop_.stop_strings.empty() || bytes_.size() == old_size) return;
  size_t best = std::string::npos;
  for (const auto& s : stop_.stop_strings) {
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t pos = bytes_.find(s, from);
    if (pos != std::string::npos) best = std::min(best, pos);
  }
  if (best == std::string::npos) return;
  cut_ = best;
  finish_ = FinishReason::stop_string;
}

bool StopTracker::timed_out() {
  if (done()) return true;
  if (stop_.timeout_s > 0 && clock_.seconds() >= stop_.timeout_s) finish_ = FinishReason::timeout;
  return done();
}

size_t StopTracker::final_text_end() const {
  if (cut_ != std::string::npos) return cut_;
  if (done()) return bytes_.size();
  // Hold back a tail that could be the start of a stop string, then cut to whole characters.
  const size_t hold = max_stop_len_ > 0 ? max_stop_len_ - 1 : 0;
  const size_t end = bytes_.size() > hold ? bytes_.size() - hold : 0;
  return utf8_complete_prefix(bytes_, end);
}

void StopTracker::flush() {
  const size_t text_end = std::max(final_text_end(), n_bytes_streamed_);
  if (n_tokens_streamed_ == tokens_.size() && text_end == n_bytes_streamed_) return;
  if (on_token_ && *on_token_) {
    Tokens chunk(tokens_.begin() + n_tokens_streamed_, tokens_.end());
    (*on_token_)(chunk, bytes_.substr(n_bytes_streamed_, text_end - n_bytes_streamed_));
  }
  n_tokens_streamed_ = tokens_.size();
  n_bytes_streamed_ = text_end;
}

std::string StopTracker::text() const {
  return bytes_.substr(0, cut_ == std::string::npos ? bytes_.size() : cut_);
}

}  // namespace specdec::strategies
