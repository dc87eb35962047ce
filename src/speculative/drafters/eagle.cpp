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
// reads them (one host read a round, as the draft model's chains and static trees). A fed node's
// attention mask is built there from its parent (EagleSource::level), so a dynamic tree is read once,
// whole, before the target verifies it (tree.cpp: grown_unread_).
//
// In a batch the chains of all sequences are drafted in lockstep (draft_chains), and so are
// their trees (the tree drafter's make_tree_batch_drafter, through EagleSource's roots and
// feed_all): each sequence has its own head cache, but at each depth one head forward (the
// layer's projections and MLP over all their rows; each row attends to its own cache:
// EagleSource::run_head) and one output-head product serve every sequence, so the head's weights
// are read once per depth, not once per sequence (bench_strategies_heads_batch). A row's results
// do not depend on the rows beside it (model/linear.h), so every sequence drafts what it drafts
// alone.
//
// A chain stops early under speculative's draft_stop as the draft model's does
// (drafters/model.cpp): once the product of the probabilities the head gave its drawn tokens
// falls below the threshold; each sequence of a batch on its own.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "speculative/drafters/tree.h"
#include "speculative/drafters/trained_head.h"

namespace specdec::strategies {
namespace {

struct EagleParams {
  std::string head, shape;  // eagle_head, eagle_shape (chain | tree)
};

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
  void prefill(const Tokens&, const at::Tensor& features) override { features_.add_prompt(features); }
  // The head's cache needs no rollback: the next catch-up overwrites this round's fed nodes.
  void observe(const Round& round, const std::vector<int64_t>&) override {
    features_.add_round(round.rows.hidden, round.accepted);
  }

  // A tree's steps. For several sources (a batch's trees in lockstep: roots, feed_all) one head
  // forward and one output-head product serve them all.
  at::Tensor root(const Tokens& seq, DraftProposal& out) override { return roots({this}, {&seq}, {&out})[0]; }
  at::Tensor feed_level(const at::Tensor& tokens, const at::Tensor& parent, int64_t depth, int64_t n_cached,
                        DraftProposal& out) override {
    Feed f;
    f.tokens = tokens, f.parent = parent, f.depth = depth, f.n_cached = n_cached;
    return feed_all({this}, {f}, {&out})[0];
  }
  std::vector<at::Tensor> roots(const std::vector<TreeSource*>& all, const std::vector<const Tokens*>& seqs,
                                const std::vector<DraftProposal*>& out) override {
    const std::vector<EagleSource*> src = sources(all);
    std::vector<Rows> rows(src.size());
    for (size_t b = 0; b < src.size(); ++b)
      if (src[b]) rows[b] = src[b]->catch_up(*seqs[b]);
    std::vector<at::Tensor> logits = logits_of(src, run_head(src, rows, out));
    for (at::Tensor& l : logits)
      if (l.defined()) l = l.select(0, 0);  // [V]: the root's one row
    return logits;
  }
  std::vector<at::Tensor> feed_all(const std::vector<TreeSource*>& all, const std::vector<Feed>& feeds,
                                   const std::vector<DraftProposal*>& out) override {
    const std::vector<EagleSource*> src = sources(all);
    std::vector<Rows> rows(src.size());
    for (size_t b = 0; b < src.size(); ++b)
      if (src[b] && feeds[b].tokens.defined())
        rows[b] = src[b]->level(feeds[b].tokens, feeds[b].parent, feeds[b].depth, feeds[b].n_cached);
    return logits_of(src, run_head(src, rows, out));  // [n, V] each
  }

  // The output head over several sources' predicted features (run_head's results): one product
  // for all, each source's rows [m, V] (undefined where its feature was).
  static std::vector<at::Tensor> logits_of(const std::vector<EagleSource*>& src, const std::vector<at::Tensor>& feat) {
    std::vector<at::Tensor> f, logits(feat.size());
    const LoadedHead* head = nullptr;
    for (size_t b = 0; b < feat.size(); ++b)
      if (feat[b].defined()) f.push_back(feat[b]), head = head ? head : src[b]->head_.get();
    if (!head) return logits;
    const at::Tensor all = head->logits(f.size() == 1 ? f[0] : at::cat(f, 0));  // [rows, V]
    int64_t begin = 0;
    for (size_t b = 0; b < feat.size(); ++b) {
      if (!feat[b].defined()) continue;
      logits[b] = all.narrow(0, begin, feat[b].size(0));
      begin += feat[b].size(0);
    }
    return logits;
  }

  // What one head forward feeds for this source: feat [m, d], the token after each row ids [m]
  // int64 on any device (a draw without mass, -1, is fed as 0 and named when the verdict reads
  // it), positions [m] and the mask (undefined: a chain). feat undefined: nothing to feed.
  struct Rows {
    at::Tensor feat, ids, positions, mask;
    at::Tensor anc;  // a level: [m, fed + m] each row's fed ancestors and itself; catch-up: undefined
  };

  // A round's first rows, the catch-up: positions n_real_ .. n - 2 with their real features and
  // the tokens after them (undefined before any feature: a 1-token prompt).
  Rows catch_up(const Tokens& seq) {
    fed_feat_ = at::Tensor();
    fed_anc_ = at::Tensor();
    const int64_t n = static_cast<int64_t>(seq.size());
    Rows r;
    r.feat = features_.take();  // [m, d]
    if (!r.feat.defined()) return r;
    const int64_t m = r.feat.size(0);
    SD_CHECK(n_real_ + m == n - 1, "eagle drafter: features for ", n_real_ + m, " positions, sequence of ", n);
    r.ids = at::tensor(std::vector<int64_t>(seq.begin() + n_real_ + 1, seq.end()), at::kLong);
    r.positions = at::arange(n_real_, n - 1, at::TensorOptions().dtype(at::kLong).device(k_.device()));
    return r;
  }

  // A level of draft nodes (TreeSource::feed_level: tokens, parent [n] int64 where the head
  // runs). Row i sees the real prefix, its fed ancestors (from fed_anc_ by its parent, without
  // a read) and itself.
  Rows level(const at::Tensor& tokens, const at::Tensor& parent, int64_t depth, int64_t n_cached) const {
    const int64_t n = tokens.size(0), fed = n_fed();
    SD_CHECK(n_cached == fed && parent.size(0) == n, "eagle drafter: fed ", fed, " nodes, told ", n_cached,
             " (internal error)");
    const auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(k_.device()); };
    const at::Tensor row = parent.to(k_.device(), at::kLong) + 1;  // 0: the root, f + 1: fed node f
    const at::Tensor self = at::eye(n, on(at::kBool));
    Rows r;
    r.ids = tokens;
    r.feat = (fed == 0 ? root_feat_ : at::cat({root_feat_, fed_feat_}, 0)).index_select(0, row);
    if (fed == 0) {
      r.anc = self;
    } else {  // row 0 of `above`: the root's (none)
      const at::Tensor above = at::cat({at::zeros({1, fed}, on(at::kBool)), fed_anc_}, 0);
      r.anc = at::cat({above.index_select(0, row), self}, 1);
    }
    const float inf = std::numeric_limits<float>::infinity();
    const at::Tensor fed_part = at::zeros({n, fed + n}, on(at::kFloat)).masked_fill(r.anc.logical_not(), -inf);
    r.mask = at::cat({at::zeros({n, n_real_}, on(at::kFloat)), fed_part}, 1);
    r.positions = at::full({n}, n_real_ + depth - 1, on(at::kLong));
    return r;
  }

  // One head forward over several sources' rows (the same head; one batch slot each): the
  // layer's weights are read once for all. Each source's K/V go to its cache's next slots (over
  // whatever a rejected draft left there). Returns each source's predicted features: the
  // catch-up's last row [1, d] (it drafts the next token), a level's [n, d]; undefined where
  // its rows were.
  static std::vector<at::Tensor> run_head(const std::vector<EagleSource*>& src, const std::vector<Rows>& rows,
                                          const std::vector<DraftProposal*>& out) {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> feat, ids, positions, result(src.size());
    std::vector<model::EagleSlot> slots;
    EagleSource* head = nullptr;  // the first with rows: its head and target serve all
    for (size_t b = 0; b < src.size(); ++b) {
      if (!rows[b].feat.defined()) continue;
      const int64_t past = src[b]->n_real_ + src[b]->n_fed();
      slots.push_back(
          {rows[b].feat.size(0), src[b]->k_.narrow(0, 0, past), src[b]->v_.narrow(0, 0, past), rows[b].mask});
      feat.push_back(rows[b].feat);
      ids.push_back(model::to_device_async(rows[b].ids, src[b]->k_.device()));
      positions.push_back(rows[b].positions);
      SD_CHECK(!head || head->head_ == src[b]->head_, "eagle drafter: a batch's slots draft with one head");
      head = head ? head : src[b];
    }
    if (!head) return result;
    const auto all = [](const std::vector<at::Tensor>& t) { return t.size() == 1 ? t[0] : at::cat(t, 0); };
    const at::Tensor emb =
        head->target_->embed(all(ids).clamp_min(0)).to(head->head_->device(), at::kFloat);  // [rows, d]
    const model::EagleOut o = head->head_->head().eagle_forward(all(feat), emb, all(positions), slots);
    int64_t begin = 0;
    for (size_t b = 0; b < src.size(); ++b) {
      if (!rows[b].feat.defined()) continue;
      EagleSource& e = *src[b];
      const int64_t m = rows[b].feat.size(0), past = e.n_real_ + e.n_fed();
      e.k_.narrow(0, past, m).copy_(o.k.narrow(0, begin, m));
      e.v_.narrow(0, past, m).copy_(o.v.narrow(0, begin, m));
      const at::Tensor f = o.features.narrow(0, begin, m);
      begin += m;
      ++out[b]->n_forwards;
      if (!rows[b].anc.defined()) {  // the catch-up: real features up to the last committed position
        e.n_real_ += m;
        e.root_feat_ = f.narrow(0, m - 1, 1);  // predicted f_{n-1}: it drafts x_n
        result[b] = e.root_feat_;
        continue;
      }
      const int64_t fed = e.n_fed();
      if (fed == 0) {
        e.fed_anc_ = rows[b].anc;
      } else {  // the earlier rows gain m columns (a node is never an earlier node's ancestor)
        const at::Tensor wider = at::cat({e.fed_anc_, at::zeros({fed, m}, e.fed_anc_.options())}, 1);
        e.fed_anc_ = at::cat({wider, rows[b].anc}, 0);
      }
      e.fed_feat_ = fed == 0 ? f : at::cat({e.fed_feat_, f}, 0);
      result[b] = f;
    }
    return result;
  }

 private:
  int64_t n_fed() const { return fed_feat_.defined() ? fed_feat_.size(0) : 0; }
  // A batch's tree sources, as EagleSources (null stays null).
  static std::vector<EagleSource*> sources(const std::vector<TreeSource*>& all) {
    std::vector<EagleSource*> src;
    for (TreeSource* s : all) {
      src.push_back(dynamic_cast<EagleSource*>(s));
      SD_CHECK(!s || src.back(), "eagle drafter: a batch's tree sources are all EAGLE heads (internal error)");
    }
    return src;
  }

  std::shared_ptr<const LoadedHead> head_;
  std::shared_ptr<model::CausalLM> target_;
  TargetFeatures features_;
  at::Tensor k_, v_;     // [capacity, Hkv, hd]: real-feature positions, then this round's fed nodes
  int64_t n_real_ = 0;   // positions fed with real features (slots 0 .. n_real_ - 1)
  at::Tensor root_feat_;  // [1, d] predicted feature of the last committed position
  at::Tensor fed_feat_;   // [fed, d] predicted feature of each node fed this round, feed order
  at::Tensor fed_anc_;    // [fed, fed] bool: row f marks fed node f's fed ancestors and itself
};

// The head named by ctx's eagle_head, for ctx's target, with a cache of ctx's capacity.
std::unique_ptr<EagleSource> make_source(const DrafterContext& ctx) {
  auto head = head_for("eagle", "eagle_head", ctx.params.typed<EagleParams>().head, "eagle", ctx.request);
  return std::make_unique<EagleSource>(std::move(head), ctx.request.target, ctx.capacity);
}

// A chain: the root's draft token, then one fed node per further token.
class EagleChainDrafter : public Drafter {
 public:
  EagleChainDrafter(std::unique_ptr<EagleSource> source, const sampling::ProcessorConfig& proc, Rng& rng,
                    DraftGrammar grammar, double stop_below)
      : source_(std::move(source)), proc_(proc), rng_(rng), grammar_(std::move(grammar)), stop_{stop_below} {}

  bool has_distribution() const override { return true; }
  TargetWants target_wants() const override { return {0, true}; }
  void prefill(const Tokens& tokens, const at::Tensor& features) override { source_->prefill(tokens, features); }
  void observe(const Round& round) override { source_->observe(round, {}); }
  void report(std::map<std::string, double>& out) const override { stop_.report(out); }

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override;

  std::unique_ptr<EagleSource> source_;
  sampling::ProcessorConfig proc_;
  Rng& rng_;
  DraftGrammar grammar_;  // structured output: its rows' mask (unset: none)
  DraftStop stop_;        // draft_stop
};

// The chains of slots b with depth[b] > 0, in lockstep: per depth one head forward over all
// their rows (EagleSource::run_head: each slot attends to its own cache) and one output-head
// product over all their predicted features; each slot draws from its own generator as it does
// alone. A batch-1 run is one slot. Each token is picked where the head runs and fed from there
// (pick_draft); the proposals keep them there (DraftProposal::drawn) and the round's verdict
// reads them (a repetition penalty takes the tokens so far where they are). Time goes to
// `ms` (the root's head forward and its rows: draft_catchup, as part of draft).
std::vector<DraftProposal> draft_chains(const std::vector<EagleChainDrafter*>& slots,
                                        const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& depth,
                                        PhaseTimes& ms) {
  const size_t B = slots.size();
  std::vector<DraftProposal> out(B);
  PhaseClock clock(ms);
  std::vector<EagleSource*> src(B, nullptr);
  std::vector<EagleSource::Rows> rows(B);
  std::vector<DraftProposal*> outs(B);
  for (size_t b = 0; b < B; ++b) {
    outs[b] = &out[b];
    if (depth[b] <= 0) continue;
    src[b] = slots[b]->source_.get();
    rows[b] = src[b]->catch_up(*seqs[b]);
  }
  // [1, d] per slot: the feature that drafts its next token (undefined: nothing to draft from yet)
  std::vector<at::Tensor> feat = EagleSource::run_head(src, rows, outs);
  std::vector<std::vector<at::Tensor>> q_rows(B), drafted(B);  // [1, V] each; [1] int64 each
  std::vector<bool> drafting(B, false);
  std::vector<Tokens> path(B);  // a masked slot's sequence + its chain so far
  std::vector<double> sure(B, 1.0);  // draft_stop: the chain's own odds of acceptance
  int64_t longest = 0;
  for (size_t b = 0; b < B; ++b) {
    if (!feat[b].defined()) continue;
    drafting[b] = true;
    longest = std::max(longest, depth[b]);
  }
  for (int64_t i = 0; i < longest; ++i) {
    std::vector<size_t> live;
    for (size_t b = 0; b < B; ++b)
      if (drafting[b] && depth[b] > i) live.push_back(b);
    if (i > 0) {  // fed node i - 1, at depth i, follows fed node i - 2 (-1: the root)
      rows.assign(B, EagleSource::Rows());
      for (size_t b : live)
        rows[b] = src[b]->level(drafted[b].back(), at::full({1}, i - 2, drafted[b].back().options()), i, i - 1);
      feat = EagleSource::run_head(src, rows, outs);
    }
    const std::vector<at::Tensor> logits = EagleSource::logits_of(src, feat);  // [1, V] for each live slot
    const double t = clock.charge(&PhaseTimes::draft);
    if (i == 0) ms.draft_catchup += t;
    for (size_t b : live) {
      const sampling::ProcessorConfig& proc = slots[b]->proc_;
      const double u = proc.greedy() ? 0.0 : slots[b]->rng_.uniform();
      // Structured output (draft_mask): the row masked after the slot's sequence and its chain so
      // far, each token read for the next row's path; a draw without mass there ends the chain.
      const DraftGrammar& g = slots[b]->grammar_;
      if (g) {
        if (i == 0) path[b] = *seqs[b];
        g.state->mask_draft(logits[b][0], path[b]);
      }
      pick_draft(logits[b][0], proc, *seqs[b], drafted[b], u, q_rows[b]);
      EagleChainDrafter& slot = *slots[b];
      if (slot.stop_.on() && i + 1 < depth[b] && slot.stop_.cut_after(sure[b], logits[b][0], q_rows[b], drafted[b].back()))
        drafting[b] = false;
      if (!g) continue;
      const auto t = drafted[b].back().item<int64_t>();
      if (t >= 0) {
        path[b].push_back(static_cast<TokenId>(t));
        continue;
      }
      drafted[b].pop_back();
      if (q_rows[b].size() > drafted[b].size()) q_rows[b].pop_back();
      drafting[b] = false;
    }
    clock.charge(&PhaseTimes::sample);
  }
  for (size_t b = 0; b < B; ++b) {
    if (drafted[b].empty()) continue;
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
    return std::make_unique<EagleChainDrafter>(make_source(ctx), ctx.proc, ctx.rng, draft_grammar(ctx),
                                               ctx.params.typed<SpeculativeParams>().draft_stop);
  }

 private:
  std::vector<std::unique_ptr<EagleChainDrafter>> slots_;
};

void check_eagle_params(EagleParams& p) {
  SD_CHECK(p.shape == "chain" || p.shape == "tree", "drafter eagle: eagle_shape must be chain or tree, got '",
           p.shape, "'");
}

}  // namespace

DrafterInfo eagle_drafter_info() {
  DrafterInfo info;
  info.name = "eagle";
  info.description = "a trained EAGLE head (specdec train-drafter --kind eagle) drafts from the target's own features";
  declare_params(info, ParamTable<EagleParams>()
                           .field("eagle_head", &EagleParams::head, "",
                                  "directory of a trained EAGLE head (head.json + head.safetensors)")
                           .field("eagle_shape", &EagleParams::shape, "chain",
                                  "chain | tree (shaped by tree_branching, tree_budget and tree_topk, as the tree "
                                  "drafter: tree_budget > 0 is EAGLE-2's dynamic tree)")
                           .finish(check_eagle_params));
  info.chains_with_q = true;
  info.head_param = "eagle_head";
  info.head_kind = "eagle";
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    if (ctx.params.typed<EagleParams>().shape == "chain") return EagleBatchDrafter::make_chain(ctx);
    return make_tree_drafter(make_source(ctx), ctx);
  };
  // A batch's chains (draft_chains) and trees (the tree drafter's lockstep over EagleSource's
  // roots and feed_all) share the head's forwards between the slots.
  info.batch_factory = [](const Request&, const Params& params, const sampling::ProcessorConfig&, int64_t batch,
                          int64_t) -> std::unique_ptr<BatchDrafter> {
    if (params.typed<EagleParams>().shape == "chain") return std::make_unique<EagleBatchDrafter>(batch);
    return make_tree_batch_drafter(make_source, batch);
  };
  return info;
}

}  // namespace specdec::strategies
