// medusa: trained Medusa heads (Cai et al. 2024; model/draft_heads.h) on the target's last
// feature. The newest committed position's feature f (the one the target's own head turned
// into the last committed token) goes through head i, and the target's frozen output head turns
// the result into q for the token i + 1 places after that: one small forward drafts the whole
// chain, with no draft cache to roll back. Draft depth is at most the number of heads.
#include "core/error.h"
#include "strategies/drafters.h"
#include "strategies/drafters/trained_head.h"

namespace specdec::strategies {
namespace {

class MedusaDrafter : public Drafter {
 public:
  MedusaDrafter(std::shared_ptr<const LoadedHead> head, const sampling::ProcessorConfig& proc, Rng& rng)
      : head_(std::move(head)), proc_(proc), rng_(rng) {}

  bool has_distribution() const override { return true; }
  bool wants_target_features() const override { return true; }
  void observe_features(const Tokens&, const std::vector<int32_t>&, const at::Tensor& hidden) override {
    features_.observe(hidden);
  }
  void commit(int64_t n_valid, const std::vector<int32_t>& accepted) override {
    (void)n_valid;
    features_.commit(accepted);
    features_.take();  // only the newest feature is ever read
  }

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    at::NoGradGuard no_grad;
    features_.begin_round();
    DraftProposal out;
    const int64_t depth = std::min(max_depth, head_->head().config().n_medusa);
    if (depth <= 0 || !features_.last().defined()) return out;
    PhaseClock clock(out.ms);
    const at::Tensor h = head_->head().medusa_forward(features_.last()).narrow(0, 0, depth);  // [depth, 1, d]
    const at::Tensor logits = head_->logits(h.reshape({depth, -1}));  // [depth, V]
    out.n_forwards = 1;
    clock.charge(&PhaseTimes::draft);
    Tokens context = seq;
    std::vector<at::Tensor> q_rows;
    for (int64_t i = 0; i < depth; ++i) {
      const TokenId x = draw_token(logits[i], proc_, context, rng_, q_rows);
      out.tokens.push_back(x);
      context.push_back(x);
    }
    clock.charge(&PhaseTimes::sample);
    if (!q_rows.empty()) out.q = at::cat(q_rows, 0).contiguous();  // [depth, V]
    clock.charge(&PhaseTimes::logits_copy);
    return out;
  }

 private:
  std::shared_ptr<const LoadedHead> head_;
  sampling::ProcessorConfig proc_;
  Rng& rng_;
  TargetFeatures features_;
};

}  // namespace

DrafterInfo medusa_drafter_info() {
  DrafterInfo info;
  info.name = "medusa";
  info.description = "trained Medusa heads (specdec train-drafter --kind medusa) draft a chain from the target's last feature";
  info.params = {{"medusa_head", "string", "", "directory of trained Medusa heads (head.json + head.safetensors)"}};
  info.chains_with_q = true;
  info.head_param = "medusa_head";
  info.head_kind = "medusa";
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    auto head = head_for("medusa", "medusa_head", ctx.params.get_string("medusa_head"), "medusa", ctx.request);
    return std::make_unique<MedusaDrafter>(std::move(head), ctx.proc, ctx.rng);
  };
  return info;
}

}  // namespace specdec::strategies
