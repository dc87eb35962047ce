#pragma once
// Batched generation: up to BatchOptions::batch_size requests share one target forward per
// step, through one KV cache with a slot per sequence and ragged fed counts
// (model::ForwardOptions::n_fed: no padding is computed or cached). Each sequence keeps its own
// cache length, stop state (StopTracker), RNG stream (seeded from its own Request::seed exactly
// as generate() seeds it) and statistics; a finished sequence leaves the batch and the next
// request's prompt is prefilled in its slot during the next step (continuous refill). Since
// every row of the packed engine's forward is computed alone, each sequence's tokens equal its
// batch-1 generate() bit for bit (tests/integration/test_strategies_batch_smollm2.cpp).
#include <functional>
#include <memory>
#include <vector>

#include "strategies/common.h"

namespace specdec::strategies {

// Checks a batch before anything is allocated: batch_size >= 1, cache_positions >= 0, every
// request valid (check_request) and on request 0's target model, and (cache_positions > 0)
// every request's prompt + max_new_tokens + `slack` + 1 within cache_positions. Returns the
// cache positions per sequence: cache_positions, or the most any request needs
// (cache_capacity(req, slack)). Errors name the option or the request index and its sizes.
int64_t check_batch(const std::vector<Request>& requests, const BatchOptions& options, int64_t slack);

// One request while it is in the batch: its stop state, statistics and clock from the moment
// it joined. Held by pointer: the tracker keeps the address of on_token.
struct BatchSequence {
  size_t request = 0;      // index into the batch's requests
  TokenCallback on_token;  // the batch callback bound to `request`
  std::unique_ptr<StopTracker> tracker;
  Stats st;
  Stopwatch clock;         // from the batch clock's last charge before it joined
  PhaseTimes joined;       // the batch's phase times at that instant
};

// The slots of a batch and the queue of requests waiting for one (continuous refill).
class BatchSlots {
 public:
  BatchSlots(const std::vector<Request>& requests, int64_t batch_size, const BatchTokenCallback& on_token,
             PhaseClock& batch_clock);
  // Gives every empty slot the next waiting request; a request that is done before any forward
  // (max_new_tokens = 0) gets its result at once and leaves its slot empty. Returns the slots
  // filled. Ordered: requests join in index order, each in the lowest empty slot.
  std::vector<int64_t> refill();
  BatchSequence* operator[](int64_t slot) { return slots_[slot].get(); }
  int64_t size() const { return static_cast<int64_t>(slots_.size()); }
  bool empty() const;  // no sequence active and none waiting
  // The sequence in `slot` is done: its Result (tracker's tokens, its stats, ms_total since it
  // joined, its share of the batch's phase times) is stored and the slot emptied. The
  // bookkeeping since the caller's last charge goes to `phase`.
  void finish(int64_t slot, double PhaseTimes::*phase = &PhaseTimes::other);
  std::vector<Result> take_results() { return std::move(results_); }

 private:
  const std::vector<Request>& requests_;
  const BatchTokenCallback& on_token_;
  PhaseClock& clock_;
  std::vector<std::unique_ptr<BatchSequence>> slots_;
  std::vector<Result> results_;
  size_t next_ = 0;
};

// One ragged target forward: slot b feeds fed[b] from cache slot start[b] (empty: nothing, its
// cache untouched). Returns the logits of each slot's last `rows` fed tokens, [B, rows, V]
// (ForwardOptions::logits_last: row j of slot b is its fed token max(0, n - rows) + j, n =
// fed[b].size(); so its last token's is row min(n, rows) - 1); the callers read no earlier
// row (a prompt fed with them gives one row), so the output head skips the prompt's. They are
// checked finite (check_finite_logits). trees: empty (chains), or per slot the parents of its
// fed tokens (ForwardOptions::parents over fed[b]; empty: a chain), one tree per sequence.
// hidden: when given, the forward also returns the final normed hidden states there, [B, T, d]
// (ForwardOptions::final_hidden: what trained drafters read). unread: empty, or per slot an
// undefined tensor or the last k tokens of fed[b] as [k] int64 on the model's device (a draft
// model's chain or static tree, DraftProposal::drawn_on): fed from there in place of fed[b]'s
// last k, unread. unread_parents: likewise, the parents of fed[b]'s last k entries as [k] int64
// on the model's device (a tree grown there, DraftProposal::drawn_parents): they replace
// trees[b]'s last k, and the forward takes the trees as ForwardOptions::device_parents.
at::Tensor forward_batch(model::CausalLM& model, model::KVCache& cache, const std::vector<Tokens>& fed,
                         const std::vector<int64_t>& start, int64_t rows, const std::vector<std::vector<int32_t>>& trees = {},
                         at::Tensor* hidden = nullptr, const std::vector<at::Tensor>& unread = {},
                         const std::vector<at::Tensor>& unread_parents = {});

// A request's token chooser (a sampler owns the request's RNG, seeded from Request::seed).
using MakePick = std::function<PickToken(const Request& req)>;

// autoregressive_decode for a batch: one target forward per step for all active sequences (a
// newcomer's prompt rides along with the others' decode rows). autoregressive_decode is this
// loop with one request, so the loop is written once. Structured output: each sequence's own
// matcher (start_constraint with the strategy's `constraint`) masks its row before the pick
// (PhaseTimes::grammar). `argmax`: the pick is the row's arg-max under these processors
// (greedy), so a row whose arg-max the grammar admits goes unmasked (ConstraintState::mask).
std::vector<Result> autoregressive_decode_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                                const BatchTokenCallback& on_token, const MakePick& make_pick,
                                                const std::shared_ptr<const sampling::Constraint>& constraint = nullptr,
                                                const sampling::ProcessorConfig* argmax = nullptr);

}  // namespace specdec::strategies
