#pragma once
// Helpers shared by the strategies: one-sequence forwards, request checks, result assembly.
#include <ATen/ATen.h>

#include <functional>

#include "model/causal_lm.h"
#include "strategies/stop.h"
#include "strategies/strategy.h"

namespace specdec::sampling { class ConstraintState; }

namespace specdec::strategies {

// Positions a request may span when the model has no trained context length (n_ctx = 0):
// the KV cache is sized from the request, so an unbounded max_new_tokens would be bad_alloc.
constexpr int64_t k_max_positions = 1 << 16;

// Checks the parts every strategy needs (target model, prompt, token ids inside the vocab,
// 0 <= max_new_tokens, prompt + max_new_tokens within n_ctx or k_max_positions).
void check_request(const Request& req);

// Throws specdec::Error naming the model, the position and the token when a logits row holds
// NaN or inf (corrupt weights, a NaN norm epsilon): caught at the step it happens, instead of
// sampling junk. logits: [n, V] float32 contiguous, row i for token ids[i] (ids may be null)
// at position start_pos + i. forward_tokens() calls it; strategies with their own forward
// calls (beam) call it too.
void check_finite_logits(const at::Tensor& logits, const model::CausalLM& model, const TokenId* ids,
                         int64_t start_pos);

// Runs `n` tokens of sequence 0 starting at cache position `start_pos`.
// returns: [n, V] float32 logits, contiguous.
at::Tensor forward_tokens(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                          int64_t start_pos);

// The same for a token tree (model/causal_lm.h ForwardOptions: parents, tree_cached, ...).
// returns: [n, V] float32 logits, contiguous; row i for ids[i].
at::Tensor forward_tokens(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                          int64_t start_pos, const model::ForwardOptions& options);

// The same, returning the whole result: logits [n, V] float32 contiguous (when options.logits)
// and, when asked for, hidden [n, d] / layer_hidden [n, d] of sequence 0.
model::ForwardResult forward_rows(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                                  int64_t start_pos, const model::ForwardOptions& options);
// The same, the tokens a tensor [n] int64 on any device (a draft model's unread chain): fed
// from there, never read.
model::ForwardResult forward_rows(model::CausalLM& model, model::KVCache& cache, const at::Tensor& tokens,
                                  int64_t start_pos, const model::ForwardOptions& options);

// Cache capacity for a request: prompt + max_new_tokens + `slack` speculative positions.
int64_t cache_capacity(const Request& req, int64_t slack);

// Moves the tracker's tokens/text/finish into a Result and stamps the total time.
Result make_result(const StopTracker& tracker, Stats stats, const Stopwatch& clock);

}  // namespace specdec::strategies

namespace specdec::strategies {

// Chooses the next token from one position's logits (under a constraint, already masked). row:
// [V] float32; context: prompt + tokens generated so far (for the repetition penalty).
using PickToken = std::function<TokenId(const at::Tensor& row, const Tokens& context)>;

// Plain autoregressive decoding (prefill, then one target forward per token) shared by the
// greedy and sampling strategies; the speculative baseline. It is autoregressive_decode_batch
// (batch.h, batch.cpp) with one request. `constraint`: the strategy's (start_constraint; null:
// only a request's own). `argmax`: pick is the arg-max under these processors (greedy_token).
Result autoregressive_decode(const Request& req, const TokenCallback& on_token, const PickToken& pick,
                             const std::shared_ptr<const sampling::Constraint>& constraint = nullptr,
                             const sampling::ProcessorConfig* argmax = nullptr);

// The constraint a request is decoded under: its own when it sets one (Request::constraint),
// else the strategy's (`strategy_constraint`, from Params::constraint); null: none.
std::shared_ptr<const sampling::Constraint> constraint_for(
    const Request& req, const std::shared_ptr<const sampling::Constraint>& strategy_constraint);
// That constraint's matcher for the request (sampling/grammar.h: Constraint::start); null: none.
std::shared_ptr<sampling::ConstraintState> start_constraint(
    const Request& req, const std::shared_ptr<const sampling::Constraint>& strategy_constraint);

}  // namespace specdec::strategies
