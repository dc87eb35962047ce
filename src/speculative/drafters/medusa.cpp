// medusa: trained Medusa heads (Cai et al. 2024; model/draft_heads.h) on the target's last
// feature. The newest committed position's feature f (the one the target's own head turned
// into the last committed token) goes through head i, and the target's frozen output head turns
// the result into q for the token i + 1 places after that: one small forward drafts the whole
// chain, with no draft cache to roll back. Draft depth is at most the number of heads.
//
// The heads run where the target's features are (LoadedHead), and the drafted tokens stay there
// until the round's verdict reads them.
//
// medusa_shape=tree hands the heads to the tree drafter (tree.cpp), as Medusa's own trees do:
// static tree_branching, or a dynamic tree by the heads' confidence (tree_budget > 0). A Medusa
// head does not see the tokens drafted before it, so every node at depth d takes its children
// from head d's row, and the whole tree still costs one forward.
//
// Confidence stopping (speculative's draft_stop) as the draft model's chains do it
// (drafters/model.cpp): the chain ends after a token once the product of the probabilities its
// heads gave their drawn tokens falls below draft_stop. The heads' rows are all computed anyway;
// a shorter chain saves verified rows.
//
// In a batch the heads run once a round for every sequence (MedusaRows::run): one forward of
// the heads and one output-head product over all the sequences' newest features, so the heads'
// and the output head's weights are read once a round, not once per sequence. Chains do it in
// MedusaBatchDrafter; trees grow in the tree drafter's lockstep (make_tree_batch_drafter), whose
// roots call is MedusaSource::roots.
#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "speculative/drafters/tree.h"
#include "speculative/drafters/trained_head.h"

namespace specdec::strategies {
namespace {

struct MedusaParams {
  std::string head, shape;  // medusa_head, medusa_shape (chain | tree)
};

// The heads over the newest feature: row i is head i's draft logits.
class MedusaRows {
 public:
  explicit MedusaRows(std::shared_ptr<const LoadedHead> head) : head_(std::move(head)) {}

  int64_t n_heads() const { return head_->head().config().n_medusa; }
  void prefill(const at::Tensor& features) { features_.add_prompt(features); }
  void observe(const Round& round) {
    ready_ = at::Tensor();  // rows are a round's: never carried to the next
    features_.add_round(round.rows.hidden, round.accepted);
    features_.take();  // only the newest feature is ever read
  }

  // The rows of several sequences' rounds, each [depth[i], V] (depth at most n_heads), in one
  // forward of the heads and one output-head product over all their newest features; a batch's
  // slots share the head (MedusaBatchDrafter). A sequence without a feature yet gets none. A row's
  // results do not depend on the rows beside it (model/linear.h), so each drafts what it
  // drafts alone. Each sequence's begin_round then takes its rows.
  static void run(const std::vector<MedusaRows*>& seqs, const std::vector<int64_t>& depth) {
    at::NoGradGuard no_grad;
    std::vector<MedusaRows*> live;
    std::vector<at::Tensor> f;
    std::vector<int64_t> rows;  // each live sequence's
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (!seqs[i] || depth[i] <= 0 || !seqs[i]->features_.last().defined()) continue;
      SD_CHECK(live.empty() || seqs[i]->head_ == live[0]->head_, "medusa drafter: a batch's slots draft with one head");
      live.push_back(seqs[i]);
      f.push_back(seqs[i]->features_.last());
      rows.push_back(std::min(depth[i], seqs[i]->n_heads()));
    }
    if (live.empty()) return;
    const int64_t m = static_cast<int64_t>(live.size());
    const int64_t most = *std::max_element(rows.begin(), rows.end());
    const LoadedHead& head = *live[0]->head_;
    const at::Tensor h = head.head().medusa_forward(m == 1 ? f[0] : at::cat(f, 0)).narrow(0, 0, most);  // [most, m, d]
    const at::Tensor logits = head.logits(h.reshape({most * m, -1})).view({most, m, -1});  // [most, m, V]
    for (int64_t i = 0; i < m; ++i) live[i]->ready_ = logits.select(1, i).narrow(0, 0, rows[i]);
  }

  // This round's rows [depth, V] (undefined before the first feature): run() for this sequence
  // alone unless a batch ran it for this round.
  at::Tensor begin_round(int64_t depth, DraftProposal& out) {
    if (!ready_.defined()) run({this}, {depth});
    at::Tensor rows = std::exchange(ready_, at::Tensor());
    if (rows.defined()) ++out.n_forwards;
    return rows;
  }

 private:
  std::shared_ptr<const LoadedHead> head_;
  TargetFeatures features_;
  at::Tensor ready_;  // [depth, V]: this round's rows, computed by run()
};

class MedusaDrafter : public Drafter {
 public:
  MedusaDrafter(std::shared_ptr<MedusaRows> rows, const DrafterContext& ctx)
      : rows_(std::move(rows)),
        proc_(ctx.proc),
        rng_(ctx.rng),
        grammar_(draft_grammar(ctx)),
        stop_{ctx.params.typed<SpeculativeParams>().draft_stop} {}

  bool has_distribution() const override { return true; }
  void report(std::map<std::string, double>& out) const override { stop_.report(out); }
  TargetWants target_wants() const override { return {0, true}; }
  void prefill(const Tokens&, const at::Tensor& features) override { rows_->prefill(features); }
  void observe(const Round& round) override { rows_->observe(round); }

  int64_t deepest() const override { return rows_->n_heads(); }
  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    DraftProposal out;
    PhaseClock clock(out.ms);
    const at::Tensor logits = rows_->begin_round(std::min(max_depth, rows_->n_heads()), out);
    clock.charge(&PhaseTimes::draft);
    if (!logits.defined()) return out;
    // Each token picked where the heads ran and left there for the verdict to read
    // (DraftProposal::drawn).
    // Structured output (draft_mask): row i masked after seq and the i tokens drafted before it,
    // each read for the next row's path; a draw without mass there ends the chain.
    // draft_stop: the chain's own odds of being accepted whole.
    std::vector<at::Tensor> q_rows, drafted;
    Tokens path = seq;
    double sure = 1.0;
    for (int64_t i = 0; i < logits.size(0); ++i) {
      if (grammar_) grammar_.state->mask_draft(logits[i], path);
      pick_draft(logits[i], proc_, seq, drafted, proc_.greedy() ? 0.0 : rng_.uniform(), q_rows);
      if (grammar_) {
        const auto t = drafted.back().item<int64_t>();
        if (t < 0) {
          drafted.pop_back();
          if (q_rows.size() > drafted.size()) q_rows.pop_back();
          break;
        }
        path.push_back(static_cast<TokenId>(t));
      }
      if (stop_.on() && i + 1 < logits.size(0) && stop_.cut_after(sure, logits[i], q_rows, drafted.back())) break;
    }
    if (drafted.empty()) return out;
    out.hold_drawn(drafted);
    clock.charge(&PhaseTimes::sample);
    if (!q_rows.empty()) out.q = at::cat(q_rows, 0).contiguous();  // [depth, V]
    clock.charge(&PhaseTimes::logits_copy);
    return out;
  }

 private:
  std::shared_ptr<MedusaRows> rows_;
  sampling::ProcessorConfig proc_;
  Rng& rng_;
  DraftGrammar grammar_;
  DraftStop stop_;        // draft_stop
};

// The tree drafter's source: the root's children come from head 0, a node at depth d's from
// head d (the tree drafter stops at max_depth() = the number of heads).
class MedusaSource : public TreeSource {
 public:
  explicit MedusaSource(std::shared_ptr<MedusaRows> rows) : rows_(std::move(rows)) {}

  int64_t max_depth() const override { return rows_->n_heads(); }
  bool wants_target_features() const override { return true; }
  void prefill(const Tokens&, const at::Tensor& features) override { rows_->prefill(features); }
  void observe(const Round& round, const std::vector<int64_t>&) override { rows_->observe(round); }

  at::Tensor root(const Tokens&, DraftProposal& out) override {
    logits_ = rows_->begin_round(rows_->n_heads(), out);
    return logits_.defined() ? logits_[0] : at::Tensor();
  }
  // A batch's trees (make_tree_batch_drafter): the heads run once for all, then each root as alone.
  std::vector<at::Tensor> roots(const std::vector<TreeSource*>& all, const std::vector<const Tokens*>& seqs,
                                const std::vector<DraftProposal*>& out) override {
    std::vector<MedusaRows*> rows;
    for (TreeSource* s : all) {
      auto* m = dynamic_cast<MedusaSource*>(s);
      SD_CHECK(!s || m, "medusa drafter: a batch's tree sources are all Medusa heads (internal error)");
      rows.push_back(m ? m->rows_.get() : nullptr);
    }
    MedusaRows::run(rows, std::vector<int64_t>(rows.size(), std::numeric_limits<int64_t>::max()));
    return TreeSource::roots(all, seqs, out);
  }

  // A node at depth d drafts its children with head d, whatever its parent.
  at::Tensor feed_level(const at::Tensor& tokens, const at::Tensor&, int64_t depth, int64_t, DraftProposal&) override {
    return logits_.narrow(0, depth, 1).expand({tokens.size(0), logits_.size(1)}).contiguous();  // [n, V]
  }

 private:
  std::shared_ptr<MedusaRows> rows_;
  at::Tensor logits_;  // [heads, V]: this round's rows
};

void check_medusa_params(MedusaParams& p) {
  SD_CHECK(p.shape == "chain" || p.shape == "tree", "drafter medusa: medusa_shape must be chain or tree, got '",
           p.shape, "'");
}

// The heads named by ctx's medusa_head, for ctx's target.
std::shared_ptr<MedusaRows> make_rows(const DrafterContext& ctx) {
  return std::make_shared<MedusaRows>(
      head_for("medusa", "medusa_head", ctx.params.typed<MedusaParams>().head, "medusa", ctx.request));
}
std::unique_ptr<TreeSource> make_source(const DrafterContext& ctx) {
  return std::make_unique<MedusaSource>(make_rows(ctx));
}

// A batch's Medusa chains: the heads run once a round for every slot (MedusaRows::run), then
// each slot drafts its chain from its own rows as it does alone. (Trees: the tree drafter's
// lockstep, make_tree_batch_drafter, with MedusaSource::roots running the heads for all.)
class MedusaBatchDrafter : public BatchDrafter {
 public:
  explicit MedusaBatchDrafter(int64_t batch) : drafters_(batch), rows_(batch) {}
  void join(int64_t slot, const DrafterContext& ctx) override {
    rows_.at(slot) = make_rows(ctx);
    drafters_.at(slot) = std::make_unique<MedusaDrafter>(rows_[slot], ctx);
  }
  Drafter& at(int64_t slot) override { return *drafters_.at(slot); }
  std::vector<DraftProposal> propose(const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& max_depth,
                                     PhaseTimes& ms) override {
    std::vector<MedusaRows*> rows;
    for (size_t b = 0; b < rows_.size(); ++b) rows.push_back(max_depth[b] > 0 ? rows_[b].get() : nullptr);
    PhaseClock clock(ms);
    MedusaRows::run(rows, max_depth);
    clock.charge(&PhaseTimes::draft);
    return BatchDrafter::propose(seqs, max_depth, ms);
  }

 private:
  std::vector<std::unique_ptr<Drafter>> drafters_;
  std::vector<std::shared_ptr<MedusaRows>> rows_;
};

}  // namespace

DrafterInfo medusa_drafter_info() {
  DrafterInfo info;
  info.name = "medusa";
  info.description = "trained Medusa heads (specdec train-drafter --kind medusa) draft a chain or a tree from the "
                     "target's last feature";
  declare_params(info, ParamTable<MedusaParams>()
                           .field("medusa_head", &MedusaParams::head, "",
                                  "directory of trained Medusa heads (head.json + head.safetensors)")
                           .field("medusa_shape", &MedusaParams::shape, "chain",
                                  "chain | tree (shaped by tree_branching, tree_budget and tree_topk, as the tree "
                                  "drafter; depth at most the number of heads)")
                           .finish(check_medusa_params));
  info.chains_with_q = true;
  info.head_param = "medusa_head";
  info.head_kind = "medusa";
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    if (ctx.params.typed<MedusaParams>().shape == "tree") return make_tree_drafter(make_source(ctx), ctx);
    return std::make_unique<MedusaDrafter>(make_rows(ctx), ctx);
  };
  info.batch_factory = [](const Request&, const Params& params, const sampling::ProcessorConfig&, int64_t batch,
                          int64_t) -> std::unique_ptr<BatchDrafter> {
    if (params.typed<MedusaParams>().shape == "tree") return make_tree_batch_drafter(make_source, batch);
    return std::make_unique<MedusaBatchDrafter>(batch);
  };
  return info;
}

}  // namespace specdec::strategies
