// The scorer (scorer.h): what the target is fed for a round, and its rows' processing.
#include "speculative/scorer.h"

#include <algorithm>

#include "model/device.h"

namespace specdec::strategies {

// The target's view of a tree round: the last committed token is fed first (the root), so
// node i is fed token i + 1 and its parent moves up by one.
model::ForwardOptions tree_forward_options(const DraftProposal& d, const at::Device& target) {
  model::ForwardOptions opt;
  if (d.drawn_parents.defined()) {  // unread: the same entries, on the target's device
    const at::Tensor par = d.drawn_parents.on(target);
    opt.device_parents = at::cat({at::full({1}, -1, par.options()), par + 1});
    return opt;
  }
  opt.parents.push_back(-1);
  for (int32_t parent : d.parents) opt.parents.push_back(parent + 1);
  return opt;
}

at::Tensor target_probabilities(const at::Tensor& logits, const sampling::ProcessorConfig& proc, const Tokens& seq,
                                const DraftProposal& d) {
  if (!d.drawn.defined() || proc.repetition_penalty == 1.0)  // only the penalty reads the draft
    return sampling::probabilities(logits, proc, seq, d.tokens, d.parents);
  sampling::DeviceDraft draft;
  draft.tokens = d.drawn_on(logits.device());
  if (d.drawn_parents.defined())
    draft.parents = d.drawn_parents.on(logits.device());
  else if (!d.parents.empty())  // a static tree: its shape on the host
    draft.parents =
        model::to_device_async(at::tensor(std::vector<int64_t>(d.parents.begin(), d.parents.end())), logits.device());
  return sampling::probabilities(logits, proc, seq, draft);
}

at::Tensor fed_tokens(TokenId last, const DraftProposal& d, const at::Device& target) {
  if (!d.drawn.defined()) {
    Tokens fed = {last};
    fed.insert(fed.end(), d.tokens.begin(), d.tokens.end());
    return at::tensor(std::vector<int64_t>(fed.begin(), fed.end()), at::kLong);
  }
  const at::Tensor drawn = d.drawn_on(target);
  return at::cat({at::full({1}, static_cast<int64_t>(last), drawn.options()), drawn});
}

at::Tensor top_token_ids(const at::Tensor& logits, int64_t k) {
  // k = 1 is the argmax: take the project's one (ties -> lowest id), which at::topk does not
  // promise.
  return model::to_host_async(k == 1 ? sampling::argmax_rows(logits).unsqueeze(1)
                                     : std::get<1>(at::topk(logits, std::min<int64_t>(k, logits.size(1)), 1)));
}

std::vector<Tokens> token_rows(const at::Tensor& ids_in) {
  const at::Tensor ids = ids_in.contiguous();  // [n, k]
  std::vector<Tokens> out(ids.size(0));
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < ids.size(0); ++r) out[r].assign(p + r * ids.size(1), p + (r + 1) * ids.size(1));
  return out;
}

}  // namespace specdec::strategies
