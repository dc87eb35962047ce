#pragma once
// The model helper (drafters/model.cpp): the drafter over a draft CausalLM, which `model` and
// `layer_skip` (a layer subset of the target) are built from.
#include <functional>
#include <memory>

#include "speculative/proposer.h"

namespace specdec::strategies {

// The `model` drafter over any CausalLM (a separate draft model, or a view of the target such
// as layer_skip's layer subset): one forward per draft token, q from the processed logits (under
// a constraint, masked first: ctx.params' draft_mask). ctx: its processors, generator, capacity.
std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<model::CausalLM> draft, const DrafterContext& ctx);
// Its batch form: one KV cache of `base` with a slot per sequence; slot b drafts with
// model_of(its context) (`base` itself or a view of it, such as a layer subset), and slots on
// the same model share every forward. Null when `base` cannot take ragged batches.
using DraftModelOf = std::function<std::shared_ptr<model::CausalLM>(const DrafterContext&)>;
std::unique_ptr<BatchDrafter> make_model_batch_drafter(DraftModelOf model_of,
                                                       const std::shared_ptr<model::CausalLM>& base,
                                                       const sampling::ProcessorConfig& proc, int64_t batch,
                                                       int64_t capacity);

}  // namespace specdec::strategies
