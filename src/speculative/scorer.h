#pragma once
// The scorer: the target's forward over a round's draft and its rows' processing. The target
// is fed [last committed, draft...] in one forward (a tree with its parents, each node seeing
// its own path), giving a next-token row after the committed text and after every draft node;
// those rows go through the request's logits processors (target_probabilities) before the
// verifier reads them.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "model/causal_lm.h"
#include "sampling/processors.h"
#include "speculative/proposer.h"

namespace specdec::strategies {

// The target's parents for a tree round's fed tokens [last committed, node 0, ...]
// (ForwardOptions::parents: the root follows the cache, node i's parent moves up by one). A
// tree whose shape is unread (DraftProposal::drawn_parents) gives them as device_parents on
// the target's device, without a read.
model::ForwardOptions tree_forward_options(const DraftProposal& d, const at::Device& target);
// The processed target rows of a round's logits [k + 1, V] (sampling::probabilities): row 0
// after the committed text `seq`, row j + 1 after it and draft node j's path. A draft held
// unread (DraftProposal::drawn) is taken where it is (sampling::DeviceDraft): no read.
at::Tensor target_probabilities(const at::Tensor& logits, const sampling::ProcessorConfig& proc, const Tokens& seq,
                                const DraftProposal& d);
// The k likeliest tokens of each row, best first (k = 1: the argmax, ties -> lowest id), in two
// halves so that they cost no read of their own: top_token_ids queues them for the host
// (model::to_host_async) before the round's verdict is read; token_rows takes them after.
// logits: [n, V] -> [n, k] int64 on the host, complete after the next read.
at::Tensor top_token_ids(const at::Tensor& logits, int64_t k);
std::vector<Tokens> token_rows(const at::Tensor& ids);
// What a round's target forward feeds: the last committed token, then the draft ([k + 1]
// int64). A draft still on the draft model's device (a chain or a static tree) is fed from
// there (DraftProposal::drawn_on).
at::Tensor fed_tokens(TokenId last, const DraftProposal& d, const at::Device& target);

}  // namespace specdec::strategies
