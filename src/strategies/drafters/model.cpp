// model: a smaller causal LM with its own KV cache (Leviathan et al. 2023; Chen et al. 2023).
// Draft tokens are sampled from q = processors(draft logits) with the strategy's generator
// (argmax when greedy), so the verifier can run lossless rejection sampling against p.
// make_drafter() checks that the draft model exists and shares the target's token ids.
#include "core/error.h"
#include "strategies/common.h"
#include "strategies/drafters.h"

namespace specdec::strategies {
namespace {

class ModelDrafter : public Drafter {
 public:
  ModelDrafter(std::shared_ptr<model::CausalLM> draft, const sampling::ProcessorConfig& cfg, Rng& rng,
               int64_t max_seq)
      : model_(std::move(draft)), cfg_(cfg), rng_(rng), cache_(model_->make_cache(1, max_seq)) {}

  void prefill(const Tokens& tokens) override {
    if (tokens.empty()) return;
    forward_tokens(*model_, cache_, tokens.data(), static_cast<int64_t>(tokens.size()), 0);
  }

  // A chain: the accepted path is the cache's own prefix, so dropping the rest is enough.
  void commit(int64_t n_valid, const std::vector<int32_t>& accepted) override {
    (void)accepted;
    if (cache_.length(0) > n_valid) cache_.truncate(0, n_valid);
  }

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override;
  bool has_distribution() const override { return true; }

 private:
  std::shared_ptr<model::CausalLM> model_;
  sampling::ProcessorConfig cfg_;
  Rng& rng_;
  model::KVCache cache_;
};

// Catch the cache up to the committed sequence (1-2 tokens after a round), then draft
// max_depth tokens one forward each; the last one itself is never fed (the next round may
// reject it).
DraftProposal ModelDrafter::propose(const Tokens& seq, int64_t max_depth) {
  DraftProposal out;
  if (max_depth <= 0) return out;
  PhaseClock clock(out.ms);
  const int64_t n = static_cast<int64_t>(seq.size());
  const int64_t n_cached = cache_.length(0);
  SD_CHECK(n_cached < n, "draft cache (", n_cached, ") is ahead of the sequence (", n, ")");
  at::Tensor logits = forward_tokens(*model_, cache_, seq.data() + n_cached, n - n_cached, n_cached);  // [T, V]
  at::Tensor row = logits.select(0, logits.size(0) - 1);  // [V]
  ++out.n_forwards;
  out.ms.draft_catchup += clock.charge(&PhaseTimes::draft);
  Tokens context = seq;
  std::vector<at::Tensor> q_rows;
  for (int64_t i = 0; i < max_depth; ++i) {
    clock.charge(&PhaseTimes::other);  // the context copy, appending x_i
    if (i > 0) {
      const TokenId prev = out.tokens.back();
      row = forward_tokens(*model_, cache_, &prev, 1, n + i - 1).select(0, 0);  // [V]
      ++out.n_forwards;
      clock.charge(&PhaseTimes::draft);
    }
    TokenId x;
    if (cfg_.greedy()) {
      x = sampling::greedy_token(row, cfg_, context);  // q is one-hot; the greedy verifier ignores it
    } else {
      at::Tensor q = sampling::probabilities(row.unsqueeze(0), cfg_, context);  // [1, V]
      x = sampling::sample_from(q, rng_.uniform());
      q_rows.push_back(q);
    }
    clock.charge(&PhaseTimes::sample);
    out.tokens.push_back(x);
    context.push_back(x);
  }
  clock.charge(&PhaseTimes::other);
  if (q_rows.empty()) return out;
  out.q = at::cat(q_rows, 0).contiguous();  // [max_depth, V]
  clock.charge(&PhaseTimes::logits_copy);
  return out;
}

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<model::CausalLM> draft, const sampling::ProcessorConfig& proc,
                                            Rng& rng, int64_t capacity) {
  return std::make_unique<ModelDrafter>(std::move(draft), proc, rng, capacity);
}

DrafterInfo model_drafter_info() {
  DrafterInfo info;
  info.name = "model";
  info.description = "a smaller causal LM (--draft) samples each draft token from its processed distribution q";
  info.needs_draft_model = true;
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    return std::make_unique<ModelDrafter>(ctx.request.draft, ctx.proc, ctx.rng, ctx.capacity);
  };
  return info;
}

}  // namespace specdec::strategies
