#pragma once
// Drafters (proposers) for speculative decoding. A drafter sees the committed sequence
// (prompt + generated) and returns a plain DraftProposal; it never sees the target or the
// verifier (DESIGN principle 2).
#include <ATen/ATen.h>

#include <memory>

#include "core/rng.h"
#include "model/causal_lm.h"
#include "sampling/processors.h"
#include "strategies/phases.h"

namespace specdec::strategies {

struct DraftProposal {
  Tokens tokens;  // x_1..x_k, k <= gamma
  at::Tensor q;   // [k, V] processed draft probabilities of x_1..x_k; undefined for drafters
                  // without a distribution (n-gram)
  int64_t n_forwards = 0;  // draft-model forwards spent
  // Where propose() spent its time (draft, draft_catchup, sample, logits_copy, other); time it
  // does not charge counts as draft (speculative.cpp: PhaseClock::charge_parts).
  PhaseTimes ms;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // sequence: all committed tokens (its last token is not yet in any cache).
  virtual DraftProposal propose(const Tokens& sequence, int64_t gamma) = 0;
  // The first n_valid tokens of the sequence are now committed; drop anything later.
  virtual void rollback(int64_t n_valid) { (void)n_valid; }
  // Processes tokens[0..n) ahead of the first proposal (the draft model's prefill).
  virtual void prefill(const Tokens& tokens) { (void)tokens; }
  virtual bool has_distribution() const = 0;
};

// Prompt lookup (Saxena 2023): find the most recent earlier occurrence of the sequence's
// last n tokens (n from max_n down to min_n) and propose the tokens that followed it.
class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t min_n, int64_t max_n);
  DraftProposal propose(const Tokens& sequence, int64_t gamma) override;
  bool has_distribution() const override { return false; }

 private:
  int64_t min_n_, max_n_;
};

// A smaller causal LM with its own KV cache. Draft tokens are sampled from
// q = processors(draft logits) with the strategy's generator (argmax when greedy).
class ModelDrafter : public Drafter {
 public:
  ModelDrafter(std::shared_ptr<model::CausalLM> draft, const sampling::ProcessorConfig& cfg, Rng& rng,
               int64_t max_seq);
  DraftProposal propose(const Tokens& sequence, int64_t gamma) override;
  void rollback(int64_t n_valid) override;
  void prefill(const Tokens& tokens) override;
  bool has_distribution() const override { return true; }

 private:
  std::shared_ptr<model::CausalLM> model_;
  sampling::ProcessorConfig cfg_;
  Rng& rng_;
  model::KVCache cache_;
};

}  // namespace specdec::strategies
