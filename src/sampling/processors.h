#pragma once
// Logits processors with Hugging Face semantics and order:
//   repetition penalty -> temperature -> top-k -> top-p -> min-p  (then softmax)
// One chain serves every strategy, and speculative decoding applies the same chain to
// the draft's and the target's logits, so it preserves the *processed* target distribution.
#include <ATen/ATen.h>

#include "core/types.h"

namespace specdec::sampling {

struct ProcessorConfig {
  double temperature = 1.0;         // 0 = greedy (argmax)
  int64_t top_k = 0;                // 0 = off
  double top_p = 1.0;               // 1 = off
  double min_p = 0.0;               // 0 = off
  double repetition_penalty = 1.0;  // 1 = off; HF: divide positive logits, multiply negative
  bool greedy() const { return temperature <= 0.0; }
};

// logits:  [N, V] float32 for N consecutive positions.
// context: tokens before the first position; for row i the repetition penalty also sees
//          `extra[0..i)` (the draft tokens that row i's position follows).
// returns: [N, V] float32 probabilities (one-hot at argmax when cfg.greedy()).
at::Tensor probabilities(const at::Tensor& logits, const ProcessorConfig& cfg,
                         const Tokens& context, const Tokens& extra = {});

}  // namespace specdec::sampling
