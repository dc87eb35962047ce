#pragma once
// Reference logits processors (tests only; std only), with Hugging Face transformers' semantics
// and order: repetition penalty -> temperature -> top-k -> top-p -> min-p -> softmax.
// Filtered tokens get logit -inf (probability 0). A structured-output mask (issue 57: the tokens
// a grammar admits after the text) goes before all of them.
//
// The context of a row is everything the text holds before it: the committed text plus, for a
// draft row, the root-to-node path of drafted tokens. Speculative decoding is lossless only for
// the target law of that text, so the target rows it verifies with must be processed with that
// same context (the repetition penalty is the processor that sees it).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "tests/reference/reference_verifier.h"

namespace specdec::reference {

struct Processors {
  std::string name = "none";
  double repetition_penalty = 1.0;  // 1: off
  double temperature = 1.0;         // 1: off
  int top_k = 0;                    // 0: off
  double top_p = 1.0;               // 1: off
  double min_p = 0.0;               // 0: off
};

// The eight processor chains the exact-law tests enumerate (test_kernels_reference,
// test_sampling_grammar after its mask): none, each processor alone, and two compositions.
inline const std::vector<Processors>& processor_chains() {
  static const std::vector<Processors> chains = [] {
    std::vector<Processors> c(8);
    c[1].name = "temperature 0.7", c[1].temperature = 0.7;
    c[2].name = "top-k 2", c[2].top_k = 2;
    c[3].name = "top-p 0.8", c[3].top_p = 0.8;
    c[4].name = "min-p 0.3", c[4].min_p = 0.3;
    c[5].name = "penalty 1.5", c[5].repetition_penalty = 1.5;
    c[6].name = "penalty 1.5 + top-k 2", c[6].repetition_penalty = 1.5, c[6].top_k = 2;
    c[7].name = "penalty 1.5 + temperature 0.7 + top-p 0.8", c[7].repetition_penalty = 1.5;
    c[7].temperature = 0.7, c[7].top_p = 0.8;
    return c;
  }();
  return chains;
}

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Each distinct token id of the context once: a positive logit is divided by the penalty, a
// negative one multiplied (HF's RepetitionPenaltyLogitsProcessor).
inline void apply_repetition_penalty(Row& logits, std::vector<int> context, double penalty) {
  std::sort(context.begin(), context.end());
  context.erase(std::unique(context.begin(), context.end()), context.end());
  for (int t : context) logits[t] = logits[t] < 0 ? logits[t] * penalty : logits[t] / penalty;
}

inline Row softmax(const Row& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  Row probs(logits.size());
  for (size_t k = 0; k < logits.size(); ++k) probs[k] = logits[k] == kMinusInf ? 0.0 : std::exp(logits[k] - m);
  return normalised(probs);
}

// Drops the tokens strictly below the k-th largest logit (ties with it stay).
inline void apply_top_k(Row& logits, int k) {
  if (k <= 0 || k >= static_cast<int>(logits.size())) return;
  Row sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double kth = sorted[k - 1];
  for (double& l : logits)
    if (l < kth) l = kMinusInf;
}

// HF TopPLogitsWarper: sort ascending, drop the prefix whose cumulative probability is
// <= 1 - top_p, always keep the top token. Equal logits rank by id, the lower id higher (as
// argmax ranks them), so the higher id is dropped first.
inline void apply_top_p(Row& logits, double top_p) {
  if (top_p >= 1.0) return;
  const Row probs = softmax(logits);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return logits[a] < logits[b] || (logits[a] == logits[b] && a > b); });
  double cum = 0.0;
  for (size_t k = 0; k + 1 < order.size(); ++k) {  // the last (top) token is always kept
    cum += probs[order[k]];
    if (cum <= 1.0 - top_p) logits[order[k]] = kMinusInf;
  }
}

// HF MinPLogitsWarper: drop tokens with probability < min_p * (the largest probability); the
// argmax always stays.
inline void apply_min_p(Row& logits, double min_p) {
  if (min_p <= 0.0) return;
  const Row probs = softmax(logits);
  const double floor = min_p * *std::max_element(probs.begin(), probs.end());
  for (size_t k = 0; k < logits.size(); ++k)
    if (probs[k] < floor) logits[k] = kMinusInf;
}

// Structured output: -inf where the grammar does not admit the token.
inline void apply_mask(Row& logits, const std::vector<bool>& admitted) {
  for (size_t k = 0; k < logits.size(); ++k)
    if (!admitted[k]) logits[k] = kMinusInf;
}

// The processed distribution of a row whose text so far is `context`; `admitted` (null: no
// constraint) masks it first. mask_last (a planted bug): the mask after min-p instead, except
// where the filters left no admitted token (that row masked first, so it stays a distribution).
inline Row process(Row logits, const std::vector<int>& context, const Processors& pr,
                   const std::vector<bool>* admitted = nullptr, bool mask_last = false) {
  const Row given = logits;
  if (admitted && !mask_last) apply_mask(logits, *admitted);
  if (pr.repetition_penalty != 1.0) apply_repetition_penalty(logits, context, pr.repetition_penalty);
  if (pr.temperature != 1.0)
    for (double& l : logits) l /= pr.temperature;
  apply_top_k(logits, pr.top_k);
  apply_top_p(logits, pr.top_p);
  apply_min_p(logits, pr.min_p);
  if (admitted && mask_last) {
    apply_mask(logits, *admitted);
    if (std::all_of(logits.begin(), logits.end(), [](double l) { return l == kMinusInf; }))
      return process(given, context, pr, admitted);
  }
  return softmax(logits);
}

}  // namespace specdec::reference
