#pragma once
// The tree helper (drafters/tree.cpp): a drafter that drafts token trees from draft logits (tree,
// eagle, medusa) gives a TreeSource and gets its Drafter, and its batch form, from
// make_tree_drafter / make_tree_batch_drafter. The tree machinery is theirs alone: the Drafter
// interface (speculative/proposer.h) and the loop never see it.
#include <ATen/ATen.h>

#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "speculative/proposer.h"

namespace specdec::strategies {

// What grows the tree drafter's trees (drafters/tree.cpp): the tree drafter chooses the shape
// (static branching, EAGLE-2 dynamic growth, Sequoia's budget) and draws the tokens; a source
// gives the draft logits. The draft model is one source, a trained EAGLE head another (eagle.cpp).
class TreeSource {
 public:
  virtual ~TreeSource() = default;
  // As Drafter::prefill (features: when wants_target_features()).
  virtual void prefill(const Tokens& tokens, const at::Tensor& features) {
    (void)tokens;
    (void)features;
  }
  // The committed tokens its cache holds, from which root() catches up (a draft model's);
  // -1: it keeps no such cache and needs prefill() (the default). A source with one may be
  // prefilled lazily (Drafter::prefill_later): its first root() then feeds the whole sequence.
  virtual int64_t cached() const { return -1; }
  // Catches up with the committed sequence; returns the draft logits [V] of its next token
  // (undefined: nothing to draft from yet). Counts its forwards in out.n_forwards.
  virtual at::Tensor root(const Tokens& seq, DraftProposal& out) = 0;
  // Feeds one depth of this round's tree: `tokens` [n] int64 ids, each new node at depth
  // `depth` (1: a child of the root), on the device of the logits the source returns or on the
  // host (a static tree keeps them where it drew them, unread; a draw without mass is fed as 0
  // and named when the verdict reads it); parent [n] int64 holds each one's parent's feed index
  // (-1: the root), on the logits' device too. n_cached nodes were fed before this round's
  // depth. Returns their draft logits [n, V]. Reads nothing (the draft model's and the trained
  // heads' attention masks are built where they run), so a dynamic tree grows without a read
  // per depth.
  virtual at::Tensor feed_level(const at::Tensor& tokens, const at::Tensor& parent, int64_t depth, int64_t n_cached,
                                DraftProposal& out) = 0;
  // The same calls for a batch's trees growing in lockstep (make_tree_batch_drafter), made on
  // one of the sources in `all`: every source there is of its type (null: a slot that does not
  // draft now), and each gets its own result, as its own call would give it. A source whose
  // model serves several sequences in one forward overrides them (EagleSource: one head forward
  // and one output-head product for all); the defaults call each source in turn.
  // roots: as root() for each non-null source (seqs[b] its sequence).
  virtual std::vector<at::Tensor> roots(const std::vector<TreeSource*>& all, const std::vector<const Tokens*>& seqs,
                                        const std::vector<DraftProposal*>& out);
  // What one feed hands a source: feed_level()'s arguments.
  struct Feed {
    at::Tensor tokens;  // [n] int64; undefined: this source feeds nothing now
    at::Tensor parent;  // [n] int64 each new node's parent's feed index
    int64_t depth = 0, n_cached = 0;
  };
  // feed_all: feed_level() for each source with a Feed (undefined where none).
  virtual std::vector<at::Tensor> feed_all(const std::vector<TreeSource*>& all, const std::vector<Feed>& feeds,
                                           const std::vector<DraftProposal*>& out);
  // After verification, as Drafter::observe; fed = the feed indices of the accepted path's fed
  // nodes (a prefix of the path).
  virtual void observe(const Round& round, const std::vector<int64_t>& fed) = 0;
  // The deepest tree it can draft (Medusa: its number of heads).
  virtual int64_t max_depth() const { return std::numeric_limits<int64_t>::max(); }
  // Whether it reads the target's features (Round::rows.hidden, prefill's features).
  virtual bool wants_target_features() const { return false; }
};
// The tree drafter over `source`, shaped by ctx.params' tree_branching / tree_budget / tree_topk.
std::unique_ptr<Drafter> make_tree_drafter(std::unique_ptr<TreeSource> source, const DrafterContext& ctx);
// Its batch form: slot b's tree drafter is over source_of(its context), and the slots' trees grow
// in lockstep, one depth at a time, each depth's feeds made in one TreeSource::feed_all call
// (the root's in one roots call). Each slot proposes what it proposes alone.
using TreeSourceOf = std::function<std::unique_ptr<TreeSource>(const DrafterContext&)>;
std::unique_ptr<BatchDrafter> make_tree_batch_drafter(TreeSourceOf source_of, int64_t batch);

}  // namespace specdec::strategies
