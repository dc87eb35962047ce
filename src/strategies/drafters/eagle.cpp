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
//
// The head runs where the target's features are (LoadedHead: on a GPU target, on the GPU), with
// its cache; the tokens it drafts are picked there and fed from there, and the round's verdict
// reads them (one host read a round, as the draft model's chains and static trees).
//
// In a batch the chains of all sequences are drafted in lockstep (draft_chains): each has its
// own head cache and forwards, but at each depth one output-head product serves every sequence,
// so the vocabulary rows (about half of the head's bytes) are read once per depth, not once per
// sequence (16 slots: 1.2x, bench_strategies_eagle_batch). A row's logits do not depend on the rows beside it (model/linear.h), so every
// sequence drafts what it drafts alone.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/device.h"
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
    k_ = at::zeros({capacity, c.n_kv_heads, c.head_dim}, at::TensorOptions().dtype(at::kFloat).device(head_->device()));
    v_ = at::zeros_like(k_);
  }

  bool wants_target_features() const override { return true; }
  void observe_features(const Tokens&, const std::vector<int32_t>&, const at::Tensor& hidden) override {
    features_.observe(hidden);
  }
  void commit(int64_t, const std::vector<int32_t>& accepted, const std::vector<int64_t>&) override {
    features_.commit(accepted);
  }

  const LoadedHead& head() const { return *head_; }

  at::Tensor root(const Tokens& seq, DraftProposal& out) override {
    const at::Tensor f = root_feature(seq, out);
    return f.defined() ? head_->logits(f).select(0, 0) : f;
  }
  at::Tensor feed(const at::Tensor& tokens, const std::vector<int32_t>& parents, int64_t n_cached,
                  DraftProposal& out) override {
    return head_->logits(feed_features(tokens, parents, n_cached, out));  // [n_new, V]
  }

  // Catch up: positions n_real_ .. n - 2 with their real features and the tokens after them.
  // Returns the predicted feature of the last committed position, [1, d] (it drafts x_n), or
  // undefined before any feature (a 1-token prompt).
  at::Tensor root_feature(const Tokens& seq, DraftProposal& out) {
    at::NoGradGuard no_grad;
    features_.begin_round();
    fed_feat_.clear();
    fed_depth_.clear();
    const int64_t n = static_cast<int64_t>(seq.size());
    const at::Tensor real = features_.take();  // [m, d]
    if (!real.defined()) return at::Tensor();  // a 1-token prompt has no feature yet
    const int64_t m = real.size(0);
    SD_CHECK(n_real_ + m == n - 1, "eagle drafter: features for ", n_real_ + m, " positions, sequence of ", n);
    const at::Tensor next = at::tensor(std::vector<int64_t>(seq.begin() + n_real_ + 1, seq.end()), at::kLong);
    const model::EagleOut o =
        forward(real, next, at::arange(n_real_, n - 1, at::TensorOptions().dtype(at::kLong).device(k_.device())),
                at::Tensor());
    n_real_ += m;
    root_feat_ = o.features.narrow(0, m - 1, 1);  // predicted f_{n-1}: it drafts x_n
    ++out.n_forwards;
    return root_feat_;
  }

  // Feeds draft nodes (TreeSource::feed: tokens [n_new] int64); returns their predicted
  // features [n_new, d].
  at::Tensor feed_features(const at::Tensor& tokens, const std::vector<int32_t>& parents, int64_t n_cached,
                           DraftProposal& out) {
    at::NoGradGuard no_grad;
    const int64_t n_new = tokens.size(0), P = n_real_ + n_cached;
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
    const at::Device device = k_.device();  // the mask and positions, built here, go up in uploads
    const model::EagleOut o = forward(at::cat(in, 0), tokens, model::to_device_async(at::tensor(pos, at::kLong), device),
                                      model::to_device_async(mask, device));
    for (int64_t i = 0; i < n_new; ++i) fed_feat_.push_back(o.features.narrow(0, i, 1));
    ++out.n_forwards;
    return o.features;
  }

 private:
  // One head forward over rows at `positions` after the cache's first past slots (the real
  // prefix, then this round's fed nodes): their K/V go to the next slots, over whatever a
  // rejected draft left there. mask undefined: a chain. ids: [m] int64 on any device (a draw
  // without mass, -1, is fed as 0 and named when the verdict reads it).
  model::EagleOut forward(const at::Tensor& feat, const at::Tensor& ids, const at::Tensor& positions,
                          const at::Tensor& mask) {
    const int64_t m = feat.size(0), past = n_real_ + static_cast<int64_t>(fed_feat_.size());
    const at::Tensor emb = target_->embed(ids.clamp_min(0)).to(head_->device(), at::kFloat);  // [m, d]
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

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override;

  std::unique_ptr<EagleSource> source_;
  sampling::ProcessorConfig proc_;
  Rng& rng_;
};

// The chains of slots b with depth[b] > 0, in lockstep: per depth, each slot's head forward
// (its own cache) and then one output-head product over all their predicted features; each
// slot draws from its own generator as it does alone. A batch-1 run is one slot. Each token is
// picked where the head runs and fed from there (pick_draft); the proposals keep them there
// (DraftProposal::drawn) and the round's verdict reads them, except with a repetition penalty,
// which reads each as it is drawn. Time goes to `ms` (the root's head forward and its rows:
// draft_catchup, as part of draft).
std::vector<DraftProposal> draft_chains(const std::vector<EagleChainDrafter*>& slots,
                                        const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& depth,
                                        PhaseTimes& ms) {
  const size_t B = slots.size();
  std::vector<DraftProposal> out(B);
  PhaseClock clock(ms);
  std::vector<at::Tensor> feat(B);  // [1, d]: the feature that drafts the slot's next token
  std::vector<Tokens> context(B);
  std::vector<std::vector<at::Tensor>> q_rows(B), drafted(B);  // [1, V] each; [1] int64 each
  const LoadedHead* head = nullptr;
  int64_t longest = 0;
  for (size_t b = 0; b < B; ++b) {
    if (depth[b] <= 0) continue;
    feat[b] = slots[b]->source_->root_feature(*seqs[b], out[b]);
    if (!feat[b].defined()) continue;  // nothing to draft from yet
    context[b] = *seqs[b];
    SD_CHECK(head == nullptr || head == &slots[b]->source_->head(), "eagle drafter: a batch's slots draft with one head");
    head = &slots[b]->source_->head();
    longest = std::max(longest, depth[b]);
  }
  for (int64_t i = 0; i < longest; ++i) {
    std::vector<size_t> live;
    std::vector<at::Tensor> f;
    for (size_t b = 0; b < B; ++b) {
      if (!feat[b].defined() || depth[b] <= i) continue;
      if (i > 0) {  // fed node i - 1 follows fed node i - 2 (-1: the root)
        std::vector<int32_t> parents;
        for (int64_t j = 0; j < i; ++j) parents.push_back(static_cast<int32_t>(j) - 1);
        feat[b] = slots[b]->source_->feed_features(drafted[b].back(), parents, i - 1, out[b]);
      }
      live.push_back(b);
      f.push_back(feat[b]);
    }
    const at::Tensor rows = head->logits(f.size() == 1 ? f[0] : at::cat(f, 0));  // [live, V]
    const double t = clock.charge(&PhaseTimes::draft);
    if (i == 0) ms.draft_catchup += t;
    for (size_t k = 0; k < live.size(); ++k) {
      const size_t b = live[k];
      const sampling::ProcessorConfig& proc = slots[b]->proc_;
      const double u = proc.greedy() ? 0.0 : slots[b]->rng_.uniform();
      drafted[b].push_back(pick_draft(rows[static_cast<int64_t>(k)], proc, context[b], u, q_rows[b]));
      if (proc.repetition_penalty != 1.0) context[b].push_back(drafted_token(drafted[b].back(), "eagle", b, i));
    }
    clock.charge(&PhaseTimes::sample);
  }
  for (size_t b = 0; b < B; ++b) {
    if (drafted[b].empty()) continue;
    if (slots[b]->proc_.repetition_penalty != 1.0)  // read as drawn
      out[b].tokens.assign(context[b].end() - static_cast<int64_t>(drafted[b].size()), context[b].end());
    else
      out[b].hold_drawn(drafted[b]);
    if (!q_rows[b].empty()) out[b].q = at::cat(q_rows[b], 0).contiguous();  // [depth, V]
  }
  clock.charge(&PhaseTimes::logits_copy);
  return out;
}

DraftProposal EagleChainDrafter::propose(const Tokens& seq, int64_t max_depth) {
  PhaseTimes ms;
  DraftProposal out = std::move(draft_chains({this}, {&seq}, {max_depth}, ms)[0]);
  out.ms = ms;
  return out;
}

// A batch's chains: one EagleChainDrafter per slot, drafted together (draft_chains).
class EagleBatchDrafter : public BatchDrafter {
 public:
  explicit EagleBatchDrafter(int64_t batch) : slots_(batch) {}
  void join(int64_t slot, const DrafterContext& ctx) override { slots_.at(slot) = make_chain(ctx); }
  Drafter& at(int64_t slot) override { return *slots_.at(slot); }
  std::vector<DraftProposal> propose(const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& max_depth,
                                     PhaseTimes& ms) override {
    std::vector<EagleChainDrafter*> slots;
    for (size_t b = 0; b < slots_.size(); ++b) slots.push_back(max_depth[b] > 0 ? slots_[b].get() : nullptr);
    return draft_chains(slots, seqs, max_depth, ms);
  }

  static std::unique_ptr<EagleChainDrafter> make_chain(const DrafterContext& ctx) {
    auto head = head_for("eagle", "eagle_head", ctx.params.get_string("eagle_head"), "eagle", ctx.request);
    auto source = std::make_unique<EagleSource>(std::move(head), ctx.request.target, ctx.capacity);
    return std::make_unique<EagleChainDrafter>(std::move(source), ctx.proc, ctx.rng);
  }

 private:
  std::vector<std::unique_ptr<EagleChainDrafter>> slots_;
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
    if (ctx.params.get_string("eagle_shape") == "chain") return EagleBatchDrafter::make_chain(ctx);
    auto head = head_for("eagle", "eagle_head", ctx.params.get_string("eagle_head"), "eagle", ctx.request);
    return make_tree_drafter(std::make_unique<EagleSource>(std::move(head), ctx.request.target, ctx.capacity), ctx);
  };
  // Chains share the output-head product between a batch's slots; trees draft slot by slot.
  info.batch_factory = [](const Request&, const Params& params, const sampling::ProcessorConfig&, int64_t batch,
                          int64_t) -> std::unique_ptr<BatchDrafter> {
    if (params.get_string("eagle_shape") != "chain") return nullptr;
    return std::make_unique<EagleBatchDrafter>(batch);
  };
  return info;
}

}  // namespace specdec::strategies
