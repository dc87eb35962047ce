#pragma once
// What the trained drafters (eagle.cpp, medusa.cpp) share: loading a head for a target, the
// target's features as verification reveals them, and drawing a draft token from a row.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not in <ATen/ATen.h> of every LibTorch)

#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/draft_heads.h"
#include "sampling/processors.h"
#include "strategies/strategy.h"

namespace specdec::strategies {

// A trained head as the drafters run it, for one target, where the target's features are: on
// a host target (the packed engines, the ATen engine on the CPU) its layers packed for the
// engine's panel kernel in bf16 (DraftHead::pack: half the bytes of the trained float32), on a
// GPU target in float32 there (DraftHead::to). Its output head: the target's rows of the head's
// draft vocabulary, prepared the same way, or the target's own output head when the head drafts
// from the whole vocabulary. Nothing a head computes is read by the host.
class LoadedHead {
 public:
  LoadedHead(const model::DraftHead& trained, const std::shared_ptr<model::CausalLM>& target);
  const model::DraftHead& head() const { return head_; }
  const at::Device& device() const { return device_; }
  bool serves(const std::shared_ptr<model::CausalLM>& target) const { return target_.lock() == target; }
  // Draft logits of features [n, d]: [n, V] float32 on the head's device, -inf outside the
  // draft vocabulary.
  at::Tensor logits(const at::Tensor& features) const;

 private:
  model::DraftHead head_;
  std::weak_ptr<model::CausalLM> target_;  // the cache outlives requests: never keeps a target alive
  at::Device device_;
  at::Tensor vocab_;          // [Vd] int64 on device_, undefined: the whole vocabulary
  model::Linear vocab_head_;  // the target's output rows of vocab_ (host: packed)
  at::Tensor vocab_rows_;     // the same rows [Vd, d] float32 on a GPU
  int64_t n_vocab_;
};

// The head in directory `dir` (parameter `key` of drafter `drafter`) for the request's target,
// loaded and prepared once per process, head file version and target: its kind must be `kind`
// and it must have been trained on this target (model::check_head_target). Errors name the
// parameter and the path.
std::shared_ptr<const LoadedHead> head_for(const std::string& drafter, const std::string& key, const std::string& dir,
                                           const std::string& kind, const Request& req);

// The target's features of the committed positions, in order, as the drafter is shown them.
class TargetFeatures {
 public:
  // The prompt's prefill: every row [n, d] is a committed position (undefined: none).
  void add_prompt(const at::Tensor& hidden);
  // A round's rows [n_fed, d] (undefined: none): the root's (the last committed token) and the
  // accepted nodes' are kept.
  void add_round(const at::Tensor& hidden, const std::vector<int32_t>& accepted);
  // Rows not yet taken, [m, d] (m may be 0), and forget them.
  at::Tensor take();
  // The newest row ([1, d]); undefined before any.
  const at::Tensor& last() const { return last_; }
  int64_t n_seen() const { return n_seen_; }  // rows committed so far (= positions with a feature)

 private:
  void add(const at::Tensor& rows);  // [m, d] committed positions
  std::vector<at::Tensor> pending_;  // [*, d] each
  at::Tensor last_;
  int64_t n_seen_ = 0;
};

}  // namespace specdec::strategies
