#pragma once
// The round loop of speculative decoding, one for every batch size (batch 1 is one slot):
// draft (proposer.h) -> score (scorer.h) -> verify (verifier.h) -> accept -> roll back, each
// sequence's draft length chosen by its controller (controller.h).
#include <memory>
#include <string>
#include <vector>

#include "speculative/controller.h"
#include "speculative/verifier.h"
#include "strategies/batch.h"

namespace specdec::sampling { class Constraint; }

namespace specdec::strategies {

// The speculative strategy's resolved configuration; the drafter comes from the registry
// (make_batch_drafter: one per slot, or a batch form sharing a draft model's forwards).
struct SpecSetup {
  VerifySetup verify;  // processors, verify=block, the drafter's name (resolved)
  int64_t gamma = 4, gamma_max = 8;
  GammaMode adaptive = GammaMode::off;
  // The drafters' names, resolved: one, or several that the controller chooses between per
  // round (speculative's `drafters`); verify.drafter names them all, for messages.
  std::vector<std::string> drafters;
  // adaptive_gamma=cost: the costs it decides from, fixed (controller_costs, read once), one per
  // drafter; empty: the process's measured table of each target/drafter pair (CostTable::of_pair).
  std::vector<std::shared_ptr<CostTable>> fixed_costs;
  std::string calibrate;  // controller_calibrate: where each call writes the measured table; empty: nowhere
  std::vector<double> synthetic;  // synthetic_acceptance by child rank; empty: off (verification decides)
  Params params;  // resolved: the drafter's name and its own parameters
  std::shared_ptr<const sampling::Constraint> constraint;  // structured output (sampling/grammar.h); null: none
  bool forced_tokens = true;  // the grammar's forced tokens drafted without the drafter (prepend_forced)
  bool jump_forward = false;  // then its jump-forward text's tokens, verified (ConstraintState::lead)
};

// Speculative decoding of one or more requests (strategies/batch.h for slots, refill and
// exactness): each round drafts for every sequence (own RNG, draft length and gamma control; a
// drafter with a model shares its forwards between the sequences: BatchDrafter), scores every
// active sequence's [last committed, draft...] in one target forward (ragged in a batch; a
// newcomer's prompt rides with its first round, alone or in a batch), verifies them in one kernel
// call per verify mode (chains: VerifyArgs.batch, ragged n_draft; trees, one per sequence) and
// rolls each sequence back on its own. A request's tokens are those of its run alone, which is
// what Speculative::generate runs (batch_size 1); at T > 0 with adaptive_gamma=cost the batch
// step's lengths (batch_lengths) depend on the whole batch, so its draws may differ (its law
// does not).
std::vector<Result> speculative_decode(const SpecSetup& setup, const std::vector<Request>& requests,
                                       const BatchOptions& options, const BatchTokenCallback& on_token);

}  // namespace specdec::strategies
