// Logits processors with Hugging Face semantics (transformers generation/logits_process.py):
//   RepetitionPenalty (a "processor", also applied in greedy/beam search), then the sampling
//   "warpers" Temperature -> TopK -> TopP -> MinP, each setting filtered scores to -inf.
#include "sampling/processors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace specdec::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_config(const ProcessorConfig& cfg) {
  SD_CHECK(cfg.top_k >= 0, "top_k must be >= 0 (0 = off), got ", cfg.top_k);
  SD_CHECK(cfg.top_p > 0.0 && cfg.top_p <= 1.0, "top_p must be in (0, 1], got ", cfg.top_p);
  SD_CHECK(cfg.min_p >= 0.0 && cfg.min_p <= 1.0, "min_p must be in [0, 1], got ", cfg.min_p);
  SD_CHECK(cfg.repetition_penalty > 0.0, "repetition_penalty must be > 0, got ", cfg.repetition_penalty);
  SD_CHECK(std::isfinite(cfg.temperature) && cfg.temperature >= 0.0, "temperature must be >= 0, got ",
           cfg.temperature);
}

// HF RepetitionPenaltyLogitsProcessor: every token id seen so far (each once) has its score
// divided by the penalty when positive and multiplied when negative.
void penalise(float* row, const std::vector<TokenId>& seen_ids, float penalty) {
  for (TokenId id : seen_ids) {
    float& s = row[id];
    s = s < 0 ? s * penalty : s / penalty;
  }
}

// Rows i = 0..N-1 see context + extra[0..i); the seen set grows by one token per row.
void apply_repetition_penalty(at::Tensor& logits /* [N, V] */, const ProcessorConfig& cfg,
                              const Tokens& context, const Tokens& extra) {
  if (cfg.repetition_penalty == 1.0) return;
  const int64_t n_rows = logits.size(0), n_vocab = logits.size(1);
  SD_CHECK(static_cast<int64_t>(extra.size()) + 1 >= n_rows, "repetition penalty: ", n_rows,
           " rows need at least ", n_rows - 1, " extra tokens, got ", extra.size());
  std::vector<uint8_t> mark(n_vocab, 0);
  std::vector<TokenId> seen_ids;
  auto add = [&](TokenId id) {
    SD_CHECK(id >= 0 && id < n_vocab, "repetition penalty: token id ", id, " outside vocab ", n_vocab);
    if (!mark[id]) { mark[id] = 1; seen_ids.push_back(id); }
  };
  for (TokenId id : context) add(id);
  float* data = logits.data_ptr<float>();
  for (int64_t i = 0; i < n_rows; ++i) {
    if (i > 0) add(extra[i - 1]);
    penalise(data + i * n_vocab, seen_ids, static_cast<float>(cfg.repetition_penalty));
  }
}

// HF TopKLogitsWarper: remove scores strictly below the k-th largest (ties survive).
void apply_top_k(at::Tensor& scores /* [N, V] */, int64_t top_k) {
  const int64_t k = std::min(top_k, scores.size(1));
  at::Tensor kth = std::get<0>(scores.topk(k, /*dim=*/1)).select(1, k - 1).unsqueeze(1);
  scores.masked_fill_(scores < kth, kNegInf);
}

// HF TopPLogitsWarper: sort ascending, drop the prefix whose cumulative probability is
// <= 1 - top_p, always keep the most likely token.
void apply_top_p(at::Tensor& scores /* [N, V] */, double top_p) {
  auto [sorted, order] = scores.sort(/*dim=*/1, /*descending=*/false);
  at::Tensor cum = sorted.softmax(1).cumsum(1);
  at::Tensor remove_sorted = cum <= (1.0 - top_p);
  remove_sorted.select(1, scores.size(1) - 1).fill_(false);
  at::Tensor remove = at::empty_like(remove_sorted).scatter_(1, order, remove_sorted);
  scores.masked_fill_(remove, kNegInf);
}

// HF MinPLogitsWarper: drop tokens with probability < min_p * max probability.
void apply_min_p(at::Tensor& scores /* [N, V] */, double min_p) {
  at::Tensor probs = scores.softmax(1);
  at::Tensor top = std::get<0>(probs.max(1, /*keepdim=*/true));
  at::Tensor remove = probs < top * min_p;
  // keep at least the arg-max (min_tokens_to_keep = 1)
  remove.scatter_(1, probs.argmax(1, /*keepdim=*/true), false);
  scores.masked_fill_(remove, kNegInf);
}

}  // namespace

at::Tensor process_logits(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                          const Tokens& extra) {
  check_config(cfg);
  SD_CHECK(logits.dim() == 2, "process_logits: logits must be [N, V], got ", logits.dim(), " dims");
  at::Tensor scores = logits.to(at::kFloat).contiguous().clone();
  apply_repetition_penalty(scores, cfg, context, extra);
  if (cfg.greedy()) return scores;
  if (cfg.temperature != 1.0) scores.div_(cfg.temperature);
  if (cfg.top_k > 0) apply_top_k(scores, cfg.top_k);
  if (cfg.top_p < 1.0) apply_top_p(scores, cfg.top_p);
  if (cfg.min_p > 0.0) apply_min_p(scores, cfg.min_p);
  return scores;
}

at::Tensor probabilities(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                         const Tokens& extra) {
  at::Tensor scores = process_logits(logits, cfg, context, extra);
  if (!cfg.greedy()) return scores.softmax(1);
  // Greedy = the limit temperature -> 0: all mass on the arg-max (first index on ties).
  at::Tensor one_hot = at::zeros_like(scores);
  one_hot.scatter_(1, scores.argmax(1, /*keepdim=*/true), 1.0f);
  return one_hot;
}

TokenId greedy_token(const at::Tensor& logits_row, const ProcessorConfig& cfg, const Tokens& context) {
  SD_CHECK(logits_row.dim() == 1 && logits_row.scalar_type() == at::kFloat && logits_row.is_contiguous(),
           "greedy_token: expected a contiguous float [V] row");
  const int64_t n_vocab = logits_row.size(0);
  const float* row = logits_row.data_ptr<float>();
  std::vector<uint8_t> seen;
  if (cfg.repetition_penalty != 1.0) {
    seen.assign(n_vocab, 0);
    for (TokenId id : context) {
      SD_CHECK(id >= 0 && id < n_vocab, "greedy_token: token id ", id, " outside vocab ", n_vocab);
      seen[id] = 1;
    }
  }
  const float penalty = static_cast<float>(cfg.repetition_penalty);
  TokenId best = 0;
  float best_score = kNegInf;
  for (int64_t v = 0; v < n_vocab; ++v) {
    float s = row[v];
    if (!seen.empty() && seen[v]) s = s < 0 ? s * penalty : s / penalty;
    if (s > best_score || v == 0) { best_score = s; best = static_cast<TokenId>(v); }
  }
  return best;
}

TokenId sample_from(const float* probs, int64_t n_vocab, double u) {
  double cum = 0;
  TokenId last_nonzero = -1;
  for (int64_t v = 0; v < n_vocab; ++v) {
    if (probs[v] <= 0.0f) continue;
    cum += probs[v];
    last_nonzero = static_cast<TokenId>(v);
    if (u < cum) return last_nonzero;
  }
  SD_CHECK(last_nonzero >= 0, "sample_from: probability row has no positive entry");
  return last_nonzero;
}

}  // namespace specdec::sampling
