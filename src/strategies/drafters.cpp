#include "strategies/drafters.h"

#include <algorithm>

#include "core/error.h"
#include "strategies/common.h"

namespace specdec::strategies {

// ---- n-gram / prompt lookup ----------------------------------------------------------------
NgramDrafter::NgramDrafter(int64_t min_n, int64_t max_n) : min_n_(min_n), max_n_(max_n) {
  SD_CHECK(min_n >= 1 && max_n >= min_n, "n-gram drafter: need 1 <= ngram_min <= ngram_max, got ngram_min=",
           min_n, " ngram_max=", max_n);
}

DraftProposal NgramDrafter::propose(const Tokens& seq, int64_t gamma) {
  DraftProposal out;
  const int64_t n = static_cast<int64_t>(seq.size());
  if (gamma <= 0) return out;
  for (int64_t len = std::min(max_n_, n - 1); len >= min_n_; --len) {
    const TokenId* suffix = seq.data() + (n - len);
    // Most recent earlier match first: recent text is the likeliest to be copied again.
    for (int64_t j = n - len - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + len, seq.data() + j)) continue;
      const int64_t from = j + len, to = std::min(n, from + gamma);
      out.tokens.assign(seq.begin() + from, seq.begin() + to);
      return out;
    }
  }
  return out;
}

// ---- draft model -------------------------------------------------------------------------
ModelDrafter::ModelDrafter(std::shared_ptr<model::CausalLM> draft, const sampling::ProcessorConfig& cfg,
                           Rng& rng, int64_t max_seq)
    : model_(std::move(draft)), cfg_(cfg), rng_(rng), cache_(model_->make_cache(1, max_seq)) {}

void ModelDrafter::prefill(const Tokens& tokens) {
  if (tokens.empty()) return;
  forward_tokens(*model_, cache_, tokens.data(), static_cast<int64_t>(tokens.size()), 0);
}

void ModelDrafter::rollback(int64_t n_valid) {
  if (cache_.length(0) > n_valid) cache_.truncate(0, n_valid);
}

// Catch the cache up to the committed sequence (1-2 tokens after a round), then draft
// gamma tokens one forward each; x_gamma itself is never fed (the next round may reject it).
DraftProposal ModelDrafter::propose(const Tokens& seq, int64_t gamma) {
  DraftProposal out;
  if (gamma <= 0) return out;
  PhaseClock clock(out.ms);
  const int64_t n = static_cast<int64_t>(seq.size());
  const int64_t n_cached = cache_.length(0);
  SD_CHECK(n_cached < n, "draft cache (", n_cached, ") is ahead of the sequence (", n, ")");
  at::Tensor logits = forward_tokens(*model_, cache_, seq.data() + n_cached, n - n_cached, n_cached);  // [T, V]
  at::Tensor row = logits.select(0, logits.size(0) - 1);  // [V]
  ++out.n_forwards;
  out.ms.draft_catchup += clock.charge(&PhaseTimes::draft);
  Tokens context = seq;
  std::vector<at::Tensor> q_rows;
  for (int64_t i = 0; i < gamma; ++i) {
    clock.charge(&PhaseTimes::other);  // the context copy, appending x_i
    if (i > 0) {
      const TokenId prev = out.tokens.back();
      row = forward_tokens(*model_, cache_, &prev, 1, n + i - 1).select(0, 0);
      ++out.n_forwards;
      clock.charge(&PhaseTimes::draft);
    }
    TokenId x;
    if (cfg_.greedy()) {
      x = sampling::greedy_token(row, cfg_, context);  // q is one-hot; the greedy verifier ignores it
    } else {
      at::Tensor q = sampling::probabilities(row.unsqueeze(0), cfg_, context);  // [1, V]
      x = sampling::sample_from(q.data_ptr<float>(), q.size(1), rng_.uniform());
      q_rows.push_back(q);
    }
    clock.charge(&PhaseTimes::sample);
    out.tokens.push_back(x);
    context.push_back(x);
  }
  clock.charge(&PhaseTimes::other);
  if (q_rows.empty()) return out;
  out.q = at::cat(q_rows, 0).contiguous();  // [gamma, V]
  clock.charge(&PhaseTimes::logits_copy);
  return out;
}

}  // namespace specdec::strategies
