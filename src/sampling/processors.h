#pragma once
// Logits processors with Hugging Face semantics and order:
//   repetition penalty -> temperature -> top-k -> top-p -> min-p  (then softmax)
// One chain serves every strategy, and speculative decoding applies the same chain to
// the draft's and the target's logits, so it preserves the *processed* target distribution.
#include <ATen/ATen.h>

#include "core/types.h"

namespace specdec::sampling {

// Temperatures below this are greedy, exactly (argmax after the repetition penalty, no RNG
// draw). Why 1e-5: at T < 1e-5 a token whose logit is 1e-3 or more below the maximum gets
// probability < exp(-100) ~ 4e-44, below float32's smallest normal, so sampling could only
// ever differ from greedy among logits within 1e-3 of the max -- inside the 2e-3 tolerance to
// which our logits are held against transformers, i.e. numerical noise. Going further down
// breaks float32 instead: logits / T overflows to inf and T itself rounds to 0 (T = 1e-300),
// which turned softmax into NaN and sampling into repeated junk.
constexpr double k_min_temperature = 1e-5;

struct ProcessorConfig {
  double temperature = 1.0;         // 0 (or anything below k_min_temperature) = greedy (argmax)
  int64_t top_k = 0;                // 0 = off
  double top_p = 1.0;               // 1 = off
  double min_p = 0.0;               // 0 = off
  double repetition_penalty = 1.0;  // 1 = off; HF: divide positive logits, multiply negative
  bool greedy() const { return temperature < k_min_temperature; }
};

// logits:  [N, V] float32: row 0 follows `context`, row i > 0 follows draft node i - 1.
// context: the committed tokens before row 0.
// draft:   [>= N-1] draft tokens; parents: [same] or empty. Node j's parent is parents[j]
//          (-1: it follows the context), or j - 1 when parents is empty (a chain). Row i > 0
//          is processed after context + the root-to-node path of node i - 1, exactly the text
//          plain decoding would have at that position (the repetition penalty sees it all).
// returns: [N, V] float32 probabilities (one-hot at argmax when cfg.greedy()).
at::Tensor probabilities(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                         const Tokens& draft = {}, const std::vector<int32_t>& parents = {});

}  // namespace specdec::sampling

// ---- additions (owner: sampling) ------------------------------------------------------
namespace specdec::sampling {

// The chain before softmax: repetition penalty, then (unless greedy) temperature, top-k,
// top-p, min-p; filtered entries are -inf. Same context/draft/parents convention as
// probabilities(). logits: [N, V] float32 -> returns [N, V] float32 (a new tensor).
at::Tensor process_logits(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                          const Tokens& draft = {}, const std::vector<int32_t>& parents = {});

// A draft held unread where the logits are (a drafter's picks: DraftProposal::drawn), as the
// repetition penalty takes it there, with no read: tokens [D] int64 (out-of-range ids, such as
// a draw without mass's -1, are clamped: the target's forward or the verdict's read names
// them); parents [D] int64 (-1: follows the context; undefined: a chain); and the node whose
// root-to-node path each row follows, rows [N] int64 (-1: the context alone; undefined: row i
// follows node i - 1, as above). A draft loop's next row follows its last pick: rows = {D - 1}.
struct DeviceDraft {
  at::Tensor tokens, parents, rows;
};
// process_logits and probabilities with such a draft (the same results, bit for bit, as with
// its tokens on the host).
at::Tensor process_logits(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                          const DeviceDraft& draft);
at::Tensor probabilities(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                         const DeviceDraft& draft);

// Where the primitives live (one implementation each):
//   argmax          kernels::math::argmax_row (kernels/verify_math.h): ties -> lowest id,
//                   NaN ranks as -inf; shared by the verification kernels, greedy_token and
//                   argmax_rows.
//   inverse CDF     kernels::math::inverse_cdf_row (kernels/verify_math.h), via sample_from.
//   repetition pen. penalise() in processors.cpp, via process_logits and greedy_token; on a
//                   device (or with a DeviceDraft) the same scaling from entry lists built
//                   there (penalise_on_device).

// Per-row argmax of [N, V] scores with kernels::math::argmax_row's rules -> [N] int64.
// Use this instead of at::argmax, whose tie/NaN rules are not the project's. The scan runs
// on the host; the result is on rows' device.
at::Tensor argmax_rows(const at::Tensor& rows);

// Greedy choice for one position: argmax after the repetition penalty (HF greedy search
// applies processors but no warpers). Avoids materialising a one-hot row.
// logits_row: [V] float32 (contiguous), on any device
TokenId greedy_token(const at::Tensor& logits_row, const ProcessorConfig& cfg, const Tokens& context);
// greedy_token for several rows at once, row i after contexts[i]: one read brings all the
// tokens to the host (a batch's greedy step is one read, not one per sequence).
std::vector<TokenId> greedy_tokens(const std::vector<at::Tensor>& rows, const ProcessorConfig& cfg,
                                   const std::vector<const Tokens*>& contexts);
// greedy_token of a row in host memory (contiguous float [V] on the CPU), counting no read: for
// host-side looks that a device run never takes (the grammar's arg-max rows, which it skips
// where the logits are elsewhere), so that the CPU twin counts the reads a GPU pays.
TokenId host_greedy_token(const at::Tensor& logits_row, const ProcessorConfig& cfg, const Tokens& context);

// Inverse-CDF sample from one probability row with a uniform u in [0, 1).
// probs: [n_vocab] (sums to 1 up to rounding; rounding slack goes to the last non-zero entry)
TokenId sample_from(const float* probs, int64_t n_vocab, double u);
// The same for a probability tensor holding one row ([V] or [1, V]) on any device (a device
// row is read through a host copy).
TokenId sample_from(const at::Tensor& probs, double u);

// Token choice that stays on the scores' device (kernels::PickArgs through its backend): one
// token per row of scores [R, V], the argmax (no uniforms; argmax_row's rules) or a draw by the
// lanes' inverse CDF with uniforms[r] (each in [0, 1)). Returns [R] int64 on that device,
// queued, not read: a draft loop feeds it to its next forward. A drawn row without mass gives
// -1, which the caller checks when it reads the tokens (a check per call would cost the device
// a reduction and a copy per token).
at::Tensor pick_tokens(const at::Tensor& scores, const std::vector<double>& uniforms = {});

}  // namespace specdec::sampling
