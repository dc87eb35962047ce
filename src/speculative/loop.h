#pragma once
// The round loop of speculative decoding: draft (proposer) -> score (scorer) -> verify
// (verifier) -> accept -> roll back, the draft length chosen by the controller.
#include <string>
#include <vector>

#include "speculative/verifier.h"
#include "strategies/batch.h"

namespace specdec::strategies {

// What the batched loop needs from the speculative strategy: its resolved configuration; the
// drafter comes from the registry (make_batch_drafter) as generate()'s does (make_drafter).
struct SpecBatchSetup {
  VerifySetup verify;
  int64_t gamma = 4, gamma_max = 8;
  std::string adaptive = "off";
  Params params;  // resolved: the drafter's name and its own parameters
};

// Speculative decoding of a batch (strategies/batch.h for slots, refill and exactness): each
// round drafts for every sequence (own RNG, draft length and gamma control; a drafter with a
// model shares its forwards between the sequences: BatchDrafter), scores every
// active sequence's [last committed, draft...] in one ragged target forward (a newcomer's
// prompt rides along), verifies all chains in one kernel call (VerifyArgs.batch, ragged
// n_draft) and rolls each sequence back on its own. Token trees are refused by name.
std::vector<Result> speculative_decode_batch(const SpecBatchSetup& setup, const std::vector<Request>& requests,
                                             const BatchOptions& options, const BatchTokenCallback& on_token);

}  // namespace specdec::strategies
