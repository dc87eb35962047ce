#pragma once
// A CausalLM that computes one prompt's prefill once and then hands it out: in a plain forward
// of one sequence, or of a ragged batch (ForwardOptions::n_fed), each sequence fed from position
// 0 whose first tokens are that prompt gets their K/V entries and logits rows copied instead of
// recomputed, and the model runs on the rest of the rows only.
//
// The harness's distribution checks run hundreds of two- or three-token generations (and as
// many log-likelihood passes) from one prompt; without this each paid the whole prefill, ~95%
// of a check's time. Every row of a forward depends only on its own token, position and
// attended keys (causal_lm.h), so on the packed Llama engine the result is bit for bit the
// inner model's; GPT-2's GEMMs block by the number of rows, which moves the last bit (~1e-7;
// tests/unit/test_model_prefix_reuse.cpp). Anything else (a dense batch, a tree, positions, a
// layer subset, hidden states) goes to the inner model unchanged, as do rows with a later start.
#include <memory>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::model {

class PrefixReuse : public CausalLM {
 public:
  // Runs the prefill of `prefix` (non-empty) on `inner` now.
  PrefixReuse(std::shared_ptr<CausalLM> inner, const std::vector<int64_t>& prefix);

  const ModelConfig& config() const override { return inner_->config(); }
  at::Device device() const override { return inner_->device(); }
  KVCache make_cache(int64_t batch, int64_t max_seq) const override { return inner_->make_cache(batch, max_seq); }
  ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, KVCache& cache,
                        const ForwardOptions& options) override;
  using CausalLM::forward;
  int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  int64_t resident_weight_bytes() const override { return inner_->resident_weight_bytes(); }
  bool ragged_batches() const override { return inner_->ragged_batches(); }
  at::Tensor embed(const at::Tensor& ids) const override { return inner_->embed(ids); }
  at::Tensor head_rows(const at::Tensor& ids) const override { return inner_->head_rows(ids); }
  at::Tensor output_head(const at::Tensor& hidden) const override { return inner_->output_head(hidden); }

  // Fed tokens served from the stored prefill so far (the forwards it saved, in tokens).
  int64_t reused_tokens() const { return reused_tokens_; }

 private:
  std::shared_ptr<CausalLM> inner_;
  std::vector<int64_t> prefix_;
  std::vector<at::Tensor> k_, v_;  // per layer: [n_kv_heads, P, head_dim] of the prefix
  at::Tensor logits_;              // [P, V]
  int64_t reused_tokens_ = 0;
};

}  // namespace specdec::model
