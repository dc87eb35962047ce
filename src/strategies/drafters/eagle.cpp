// eagle: a trained EAGLE head (Li et al. 2024; model/draft_heads.h) drafts from the target's
// own features. Position j's input is the target's feature f_j with the token after it; the
// head predicts f_{j+1}, and the target's frozen output head turns that into the draft
// distribution q of the next token. After a round the accepted positions' real features
// (the verification forward's hidden states) replace the predicted ones: the head's KV cache
// keeps only positions fed with real features, so rolling back is moving its length.
//
// Each round: one head forward over the positions whose real features arrived since the last
// round (the root and the accepted path), then one per depth of the draft. eagle_shape=chain
// drafts a chain; eagle_shape=tree hands the head to the tree drafter (tree.cpp), which grows
// static, EAGLE-2 dynamic (by the head's confidence) or Sequoia-budgeted trees with it: a node
// is fed with its parent's predicted feature, attending to the real prefix and its ancestors.
#include <limits>

#include "core/error.h"
#include "strategies/drafters.h"
#include "strategies/drafters/trained_head.h"

namespace specdec::strategies {
namespace {

// The head, its cache and the target's features: a tree source (chains are trees too).
class EagleSource : public TreeSource {
 public:
  EagleSource(std::shared_ptr<const LoadedHead> head, std::shared_ptr<model::CausalLM> target, int64_t capacity)
      : head_(std::move(head)), target_(std::move(target)) {
    const model::DraftHeadConfig& c = head_->head().config();
    k_ = at::zeros({capacity, c.n_kv_heads, c.head_dim}, at::kFloat);
    v_ = at::zeros_like(k_);
  }

  bool wants_target_features() const override { return true; }
  void observe_features(const Tokens&, const std::vector<int32_t>&, const at::Tensor& hidden) override {
    features_.observe(hidden);
  }
  void commit(int64_t, const std::vector<int32_t>& accepted, const std::vector<int64_t>&) override {
    features_.commit(accepted);
  }

  // Catch up: positions n_real_ .. n - 2 with their real features and the tokens after them.
  at::Tensor root(const Tokens& seq, DraftProposal& out) override {
    at::NoGradGuard no_grad;
    features_.begin_round();
    fed_feat_.clear();
    fed_depth_.clear();
    const int64_t n = static_cast<int64_t>(seq.size());
    const at::Tensor real = features_.take();  // [m, d]
    if (!real.defined()) return at::Tensor();  // a 1-token prompt has no feature yet
    const int64_t m = real.size(0);
    SD_CHECK(n_real_ + m == n - 1, "eagle drafter: features for ", n_real_ + m, " positions, sequence of ", n);
    const Tokens next(seq.begin() + n_real_ + 1, seq.end());
    const model::EagleOut o = forward(real, next, at::arange(n_real_, n - 1, at::kLong), at::Tensor());
    n_real_ += m;
    root_feat_ = o.features.narrow(0, m - 1, 1);  // predicted f_{n-1}: it drafts x_n
    ++out.n_forwards;
    return head_->logits(root_feat_).select(0, 0);
  }

  at::Tensor feed(const Tokens& tokens, const std::vector<int32_t>& parents, int64_t n_cached,
                  DraftProposal& out) override {
    at::NoGradGuard no_grad;
    const int64_t n_new = static_cast<int64_t>(tokens.size()), P = n_real_ + n_cached;
    std::vector<at::Tensor> in;
    std::vector<int64_t> pos;
    // Row i sees the real prefix, its fed ancestors and itself.
    at::Tensor mask = at::full({n_new, P + n_new}, -std::numeric_limits<float>::infinity(), at::kFloat);
    mask.narrow(1, 0, n_real_).zero_();
    for (int64_t i = 0; i < n_new; ++i) {
      const int32_t parent = parents.at(n_cached + i);
      in.push_back(parent < 0 ? root_feat_ : fed_feat_.at(parent));
      fed_depth_.push_back(parent < 0 ? 1 : fed_depth_.at(parent) + 1);
      pos.push_back(n_real_ + fed_depth_.back() - 1);
      for (int32_t a = parent; a >= 0; a = parents.at(a)) mask[i][n_real_ + a] = 0;
      mask[i][P + i] = 0;
    }
    const model::EagleOut o = forward(at::cat(in, 0), tokens, at::tensor(pos, at::kLong), mask);
    for (int64_t i = 0; i < n_new; ++i) fed_feat_.push_back(o.features.narrow(0, i, 1));
    ++out.n_forwards;
    return head_->logits(o.features);  // [n_new, V]
  }

 private:
  // One head forward over rows at `positions` after the cache's first past slots (the real
  // prefix, then this round's fed nodes): their K/V go to the next slots, over whatever a
  // rejected draft left there. mask undefined: a chain.
  model::EagleOut forward(const at::Tensor& feat, const Tokens& ids, const at::Tensor& positions,
                          const at::Tensor& mask) {
    const int64_t m = feat.size(0), past = n_real_ + static_cast<int64_t>(fed_feat_.size());
    const at::Tensor emb = target_->embed(at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong))
                               .to(at::kCPU).to(at::kFloat);  // [m, d]
    model::EagleOut o = head_->head().eagle_forward(feat, emb, positions, k_.narrow(0, 0, past), v_.narrow(0, 0, past), mask);
    k_.narrow(0, past, m).copy_(o.k);
    v_.narrow(0, past, m).copy_(o.v);
    return o;
  }

  std::shared_ptr<const LoadedHead> head_;
  std::shared_ptr<model::CausalLM> target_;
  TargetFeatures features_;
  at::Tensor k_, v_;     // [capacity, Hkv, hd]: real-feature positions, then this round's fed nodes
  int64_t n_real_ = 0;   // positions fed with real features (slots 0 .. n_real_ - 1)
  at::Tensor root_feat_;                 // [1, d] predicted feature of the last committed position
  std::vector<at::Tensor> fed_feat_;     // [1, d] predicted feature of each fed node, feed order
  std::vector<int64_t> fed_depth_;       // depth of each fed node (1: a child of the root)
};

// A chain: the root's draft token, then one fed node per further token.
class EagleChainDrafter : public Drafter {
 public:
  EagleChainDrafter(std::unique_ptr<EagleSource> source, const sampling::ProcessorConfig& proc, Rng& rng)
      : source_(std::move(source)), proc_(proc), rng_(rng) {}

  bool has_distribution() const override { return true; }
  bool wants_target_features() const override { return true; }
  void observe_features(const Tokens& fed, const std::vector<int32_t>& parents, const at::Tensor& hidden) override {
    source_->observe_features(fed, parents, hidden);
  }
  void commit(int64_t n_valid, const std::vector<int32_t>& accepted) override {
    source_->commit(n_valid, accepted, {});
  }

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    DraftProposal out;
    if (max_depth <= 0) return out;
    PhaseClock clock(out.ms);
    at::Tensor row = source_->root(seq, out);  // [V]
    out.ms.draft_catchup += clock.charge(&PhaseTimes::draft);
    if (!row.defined()) return out;
    Tokens context = seq;
    std::vector<at::Tensor> q_rows;
    std::vector<int32_t> parents;
    for (int64_t i = 0; i < max_depth; ++i) {
      if (i > 0) {
        parents.push_back(static_cast<int32_t>(i) - 2);  // fed node i - 1 follows fed node i - 2 (-1: the root)
        row = source_->feed({out.tokens.back()}, parents, i - 1, out).select(0, 0);
        clock.charge(&PhaseTimes::draft);
      }
      const TokenId x = draw_token(row, proc_, context, rng_, q_rows);
      out.tokens.push_back(x);
      context.push_back(x);
      clock.charge(&PhaseTimes::sample);
    }
    if (!q_rows.empty()) out.q = at::cat(q_rows, 0).contiguous();  // [depth, V]
    clock.charge(&PhaseTimes::logits_copy);
    return out;
  }

 private:
  std::unique_ptr<EagleSource> source_;
  sampling::ProcessorConfig proc_;
  Rng& rng_;
};

void check_eagle_params(const Params& p) {
  const std::string shape = p.get_string("eagle_shape");
  SD_CHECK(shape == "chain" || shape == "tree", "drafter eagle: eagle_shape must be chain or tree, got '", shape, "'");
}

}  // namespace

DrafterInfo eagle_drafter_info() {
  DrafterInfo info;
  info.name = "eagle";
  info.description = "a trained EAGLE head (specdec train-drafter --kind eagle) drafts from the target's own features";
  info.params = {{"eagle_head", "string", "", "directory of a trained EAGLE head (head.json + head.safetensors)"},
                 {"eagle_shape", "string", "chain",
                  "chain | tree (shaped by tree_branching, tree_budget and tree_topk, as the tree drafter: "
                  "tree_budget > 0 is EAGLE-2's dynamic tree)"}};
  info.chains_with_q = true;
  info.head_param = "eagle_head";
  info.head_kind = "eagle";
  info.check = check_eagle_params;
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    check_eagle_params(ctx.params);
    auto head = head_for("eagle", "eagle_head", ctx.params.get_string("eagle_head"), "eagle", ctx.request);
    auto source = std::make_unique<EagleSource>(std::move(head), ctx.request.target, ctx.capacity);
    if (ctx.params.get_string("eagle_shape") == "tree") return make_tree_drafter(std::move(source), ctx);
    return std::make_unique<EagleChainDrafter>(std::move(source), ctx.proc, ctx.rng);
  };
  return info;
}

}  // namespace specdec::strategies
