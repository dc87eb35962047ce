// tree: the draft model expands a token tree, which the target scores in one forward and the
// verifier walks (kernels/tree_math.h). Two shapes:
//  - static (tree_budget = 0): tree_branching = "k1,k2,..." children per node at each depth
//    (Medusa / SpecInfer style). Greedy: the top-k draft tokens. Sampling: k independent
//    draws from the draft distribution q, so the multi-draft verifier (SpecInfer's multi-step
//    speculative sampling) stays lossless; their q rows go to the verifier.
//  - dynamic (tree_budget = B > 0, EAGLE-2, Li et al. 2024): at each depth the tree_topk
//    most likely frontier nodes (cumulative draft log-probability) are expanded with their
//    tree_topk best children; at the end the B most likely nodes are kept. Children are
//    chosen by value, not drawn, so at T > 0 the tree carries no q and is verified
//    tokens_only (sample y ~ p, follow the child equal to y): lossless for any tree.
//  - hardware-aware (tree_budget = auto; Sequoia's idea, Chen et al. 2024): the dynamic tree's
//    node budget is chosen each round to maximise predicted tokens per second,
//    (1 + sum of the kept nodes' path probabilities) / (draft time + verify time(budget + 1)).
//    The sum is EAGLE-2's estimate of the expected accepted length (a node is accepted about
//    as often as the draft believes its path); the verify time comes from the controller's
//    measured curve under adaptive_gamma=cost (DrafterContext::costs, once it has timed two row
//    counts), else from the target's cost curve, measured once per target and thread count
//    (verify_profile) and reported in Stats::drafter_stats as verify_ms_rows_<n>.
// Under adaptive_gamma=cost the controller chooses the tree's depth (0: no tree), weighing each
// depth by the nodes a tree of it verifies (rows_at: the shape's count, until the controller has
// measured what rounds of that depth proposed), so a tree's budget and depth are chosen against
// one verify curve.
// Confidence stopping (speculative's draft_stop, as the chains have it): the tree grows no
// deeper once its likeliest path so far has a draft probability below draft_stop (static
// trees track their paths' log-probabilities for it). One read a depth; any tree is lossless,
// and whether a node has children depends only on draws above it.
// Each depth costs one forward of the tree's source over the nodes it expands: the draft model
// here (ForwardOptions::tree_cached keeps the earlier levels in its cache; accepted nodes' cache
// slots are compacted in observe()), a trained EAGLE head (eagle.cpp, make_tree_drafter), or
// Medusa heads (medusa.cpp: no forward per depth, each depth reads its own head's row).
// Host reads: a static tree knows its shape before its tokens, so they stay on the source's
// device (levels_: each depth feeds the whole previous one) and the round's verdict reads them
// (DraftProposal::drawn): no read of its own. A dynamic tree grows where the source runs: each
// depth's children, path log-probabilities and frontier stay there (cands_), the budget's nodes
// are chosen there too, and the target's forward and the verifier take the tree, tokens and
// parents, from there (DraftProposal::drawn_parents): the verdict reads it, one read a round.
// (tree_budget = auto reads the candidates once more: it chooses the budget on the host from
// their path probabilities and the measured verify times.) Every source feeds a depth at a
// time with the parents where it runs (TreeSource::feed_level; the draft model through
// ForwardOptions::device_parents). A repetition penalty processes each row after its own path,
// taken there too (sampling::DeviceDraft): no read either.
// A round runs in steps (TreeDrafter::begin, next_feed, take, end) that TreeDrafter::grow
// drives, so a batch's trees can grow in lockstep (make_tree_batch_drafter): the roots in one
// call of the source, then per depth every tree's frontier in one TreeSource::feed_all. A source
// that serves several sequences in one forward (EAGLE's head) reads its weights once per depth
// for the whole batch; batch 1 is the same code with one tree.
// Structured output (issue 57, item 4; draft_mask, on by default): the tree keeps a matcher of its
// own (DraftGrammar) and masks every row before its processors, after the sequence and the
// root-to-node path of the node it follows (ConstraintState::mask_draft, rolling back between
// paths), so children are chosen (static: top-k or drawn; dynamic: by masked log-probability)
// among the tokens the grammar admits, and a drawn node's q is the masked law. That needs each
// depth's tokens on the host before the next depth's rows: a read per depth under a constraint.
// The tree then ends on the host (a fixed budget as auto's: the -inf candidates drop), and
// keep_admitted cuts what is left off the grammar (a top-k beyond the admitted tokens, children
// after an end id).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "model/device.h"
#include "strategies/common.h"
#include "sampling/grammar.h"
#include "speculative/controller.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "speculative/drafters/tree.h"

namespace specdec::strategies {
namespace {

// Children per node at each depth, e.g. "4,2,2,1".
std::vector<int64_t> parse_branching(const std::string& text) {
  return parse_int_list("tree drafter", "tree_branching", text, 1, 64);
}

int64_t parse_budget(const std::string& text) {
  if (text == "auto") return -1;
  size_t used = 0;
  int64_t b = -2;
  try {
    b = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SD_CHECK(used == text.size() && b >= 0 && b <= k_max_draft_nodes, "tree drafter: tree_budget = '", text,
           "' must be auto, 0 (the static tree_branching shape) or a node count in [1, ", k_max_draft_nodes, "]");
  return b;
}

constexpr int64_t k_profile_rows = 64;

// The target's forward time (ms) for 1..64 fed rows after a short context: measured at
// 1, 2, 4, ..., 64 rows (best of two), linear in between. Measured once per target and engine
// thread count; a few seconds on a 1.5B model on 2 cores.
const std::vector<double>& verify_profile(const Request& req) {
  static std::mutex mu;
  static std::map<std::pair<const model::CausalLM*, int>, std::vector<double>> cache;
  std::lock_guard<std::mutex> lock(mu);
  model::CausalLM& target = *req.target;
  auto& curve = cache[{&target, parallel::num_threads()}];
  if (!curve.empty()) return curve;
  const int64_t ctx_len = std::min<int64_t>(128, static_cast<int64_t>(req.prompt.size()));
  const Tokens context(req.prompt.end() - ctx_len, req.prompt.end());
  model::KVCache cache_kv = target.make_cache(1, ctx_len + k_profile_rows);
  forward_tokens(target, cache_kv, context.data(), ctx_len, 0);
  std::vector<std::pair<int64_t, double>> points;
  for (int64_t rows = 1; rows <= k_profile_rows; rows *= 2) {
    const Tokens fed(rows, context.back());
    double best = 1e300;
    for (int rep = 0; rep < 2; ++rep) {
      Stopwatch sw;
      forward_tokens(target, cache_kv, fed.data(), rows, ctx_len);
      best = std::min(best, sw.ms());
    }
    points.emplace_back(rows, best);
  }
  curve.resize(k_profile_rows);
  for (size_t i = 0; i + 1 < points.size(); ++i)
    for (int64_t r = points[i].first; r <= points[i + 1].first; ++r) {
      const double f = double(r - points[i].first) / double(points[i + 1].first - points[i].first);
      curve[r - 1] = points[i].second + f * (points[i + 1].second - points[i].second);
    }
  return curve;
}

struct Node {
  TokenId token;      // -1 while unread (TreeDrafter::levels_)
  int32_t parent;     // node index, -1 = the last committed token
  double logp;        // cumulative draft log-probability of the path
  at::Tensor q;       // [V] distribution the token was drawn from (static sampling only)
  int64_t fed = -1;   // feed order in the draft cache (slot base + fed), -1 = never fed
};

// The tree's shape (tree, eagle and medusa trees read it), parsed and checked once.
struct TreeParams {
  std::string branching_text, budget_text;  // as given
  std::vector<int64_t> branching;           // children per node at each depth
  int64_t budget = 0;                       // 0 static, > 0 fixed, -1 (auto) chosen per round
  int64_t topk = 0;
};

// Shape, budget and width, before any model is loaded.
void check_tree_params(TreeParams& p) {
  p.branching = parse_branching(p.branching_text);
  p.budget = parse_budget(p.budget_text);
  SD_CHECK(p.topk >= 1 && p.topk <= 16, "tree drafter: tree_topk = ", p.topk, " must be in [1, 16]");
  int64_t level = 1, total = 0;
  for (int64_t k : p.branching) total += (level = std::min<int64_t>(level * k, int64_t{1} << 40));
  SD_CHECK(p.budget != 0 || total <= k_max_draft_nodes, "tree drafter: tree_branching = '", p.branching_text,
           "' makes ", total, " nodes, more than the limit of ", k_max_draft_nodes);
}

// The draft model as a tree source: its own KV cache, the tree's nodes fed level by level
// (ForwardOptions::tree_cached keeps the earlier levels in the cache).
class ModelTreeSource : public TreeSource {
 public:
  ModelTreeSource(std::shared_ptr<model::CausalLM> model, int64_t capacity)
      : model_(std::move(model)), cache_(model_->make_cache(1, capacity)) {}
  void prefill(const Tokens& tokens, const at::Tensor&) override {
    if (!tokens.empty()) forward_tokens(*model_, cache_, tokens.data(), static_cast<int64_t>(tokens.size()), 0);
  }
  int64_t cached() const override { return cache_.length(0); }
  at::Tensor root(const Tokens& seq, DraftProposal& out) override {
    const int64_t n = static_cast<int64_t>(seq.size()), n_cached = cache_.length(0);
    base_ = n;
    SD_CHECK(n_cached < n, "tree drafter: draft cache (", n_cached, ") is ahead of the sequence (", n, ")");
    const at::Tensor rows = forward_tokens(*model_, cache_, seq.data() + n_cached, n - n_cached, n_cached);
    ++out.n_forwards;
    return rows[rows.size(0) - 1];
  }
  // A depth at a time, the tree's parents kept where the model runs (ForwardOptions::
  // device_parents): the ATen engine builds its mask from them there, so a dynamic tree grows
  // without a read per depth; the packed engine reads them (on the CPU, a copy).
  at::Tensor feed_level(const at::Tensor& tokens, const at::Tensor& parent, int64_t, int64_t n_cached,
                        DraftProposal& out) override {
    const at::Tensor par = model::to_device_async(parent, model_->device());
    parents_ = n_cached == 0 ? par : at::cat({parents_.narrow(0, 0, n_cached), par});
    model::ForwardOptions opt;
    opt.tree_cached = n_cached;
    opt.device_parents = parents_;
    ++out.n_forwards;
    return forward_rows(*model_, cache_, tokens, base_ + n_cached, opt).logits;  // [tokens, V]
  }
  // The accepted path's fed nodes hold their K/V at slots base + feed order: move them next to
  // the committed prefix; later tokens are fed by the next catch-up.
  void observe(const Round& round, const std::vector<int64_t>& fed) override {
    std::vector<int64_t> keep;
    for (int64_t f : fed) keep.push_back(base_ + f);
    if (cache_.length(0) > base_) cache_.compact(0, base_, keep);
    if (cache_.length(0) > round.n_valid) cache_.truncate(0, round.n_valid);
  }

 private:
  std::shared_ptr<model::CausalLM> model_;
  model::KVCache cache_;
  int64_t base_ = 0;  // the cache slot of fed node 0: the committed length
  at::Tensor parents_;  // [fed this round] int64: each fed node's parent's feed index (-1: the root)
};

class TreeDrafter : public Drafter {
 public:
  TreeDrafter(std::unique_ptr<TreeSource> source, const DrafterContext& ctx)
      : source_(std::move(source)), cfg_(ctx.proc), rng_(ctx.rng), grammar_(draft_grammar(ctx)) {
    const TreeParams& p = ctx.params.typed<TreeParams>();
    branching_ = p.branching;
    budget_ = p.budget;
    topk_ = p.topk;
    stop_.below = ctx.params.typed<SpeculativeParams>().draft_stop;
    costs_ = ctx.costs;
    // Until the controller's table has timed two row counts, the budget reads the target's
    // profile (measured here, before the request's clock, not inside a round).
    if (budget_ == k_auto && (!costs_ || costs_->now().verify_ms.size() < 2)) profile_ = &verify_profile(ctx.request);
  }

  void prefill(const Tokens& tokens, const at::Tensor& features) override { source_->prefill(tokens, features); }
  bool prefill_later() const override { return source_->cached() >= 0; }
  TargetWants target_wants() const override { return {0, source_->wants_target_features()}; }
  bool has_distribution() const override { return budget_ == 0 && !cfg_.greedy(); }
  double rows_at(int64_t depth) const override;
  int64_t deepest() const override {
    return budget_ == 0 ? std::min<int64_t>(static_cast<int64_t>(branching_.size()), source_->max_depth())
                        : source_->max_depth();
  }
  void report(std::map<std::string, double>& out) const override;

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    PhaseTimes ms;
    DraftProposal out = std::move(grow({this}, {&seq}, {max_depth}, ms)[0]);
    out.ms = ms;
    return out;
  }
  void observe(const Round& round) override;

  // The round of several tree drafters (null, or max_depth[b] <= 0: an empty proposal), grown in
  // lockstep: the roots in one TreeSource::roots call, then per depth every tree's frontier in
  // one TreeSource::feed_all call. A batch-1 round is one tree. Time goes to `ms`.
  static std::vector<DraftProposal> grow(const std::vector<TreeDrafter*>& trees, const std::vector<const Tokens*>& seqs,
                                         const std::vector<int64_t>& max_depth, PhaseTimes& ms);

 private:
  // A round in steps (grow() drives them): reset(); begin() from the root's row [V], which
  // returns the tree's depth; for d = 1 .. depth - 1, next_feed(d), then take(d, the source's
  // logits for it); end() keeps the budget's nodes and makes the proposal.
  void reset();
  int64_t begin(const Tokens& seq, int64_t max_depth, const at::Tensor& root);
  TreeSource::Feed next_feed(int64_t d);
  void take(int64_t d, const at::Tensor& logits);
  DraftProposal end(const Stopwatch& round, PhaseClock& clock, DraftProposal out);

  // A static tree's children of the expanded nodes `parents` (-1: the root), one row of `rows`
  // [F, V] each: the top k by value (greedy) or k draws from q. Their tokens join levels_,
  // unread.
  void expand(const at::Tensor& rows, const std::vector<int32_t>& parents, int64_t k);
  // What feeds nodes[ids] (ascending, parents fed before, all at `depth`) into the source.
  TreeSource::Feed feed_of(const std::vector<int32_t>& ids, int64_t depth);
  // A dynamic tree's rows [F, V] (the root's, or the frontier's: sel_ of the last depth), each
  // row's top tree_topk children by processed log-probability: [F, k] values and ids.
  // row_nodes: the node each row follows (paths()), with a repetition penalty.
  std::tuple<at::Tensor, at::Tensor> best_children(const at::Tensor& rows, const at::Tensor& row_nodes) const;
  // A dynamic tree's depth of candidates, appended to cands_ (-inf path log-probabilities as
  // such), and (tree_budget = auto) at the end the one read that brings them all into nodes_.
  void add_candidates(const at::Tensor& ids, const at::Tensor& logp, const at::Tensor& parent);
  void read_candidates();
  // What the repetition penalty sees after each row: the tree so far where it grew, and the node
  // each row follows, row_nodes [F] int64 on the source's device (-1: the root); undefined
  // (no penalty): nothing.
  sampling::DeviceDraft paths(const at::Tensor& row_nodes) const;
  // A fixed budget's end(): without a read (the tree stays on the device).
  DraftProposal keep_on_device(PhaseClock& clock, DraftProposal out);
  DraftProposal finish(std::vector<int32_t> keep, PhaseClock& clock, DraftProposal out);
  // Structured output: rows [F, V] masked in place, row r after the sequence and paths[r] (the
  // tokens of the node it follows, root first); the static tree's last depth read into nodes_;
  // the paths of the dynamic frontier's nodes (sel_), read.
  void mask_rows(const at::Tensor& rows, const std::vector<Tokens>& paths);
  void read_level();
  std::vector<Tokens> frontier_paths();
  int64_t choose_budget(double ms_draft);
  // draft_stop: whether the tree grows no deeper, its likeliest path's probability so far below
  // draft_stop (a read; false when off). Counts the cut.
  bool stops();
  // A round's proposal of `nodes` nodes (report()).
  void count_round(int64_t nodes);

  std::unique_ptr<TreeSource> source_;
  sampling::ProcessorConfig cfg_;
  Rng& rng_;
  DraftGrammar grammar_;  // structured output: its rows' mask (unset: none)
  std::vector<int64_t> branching_;
  static constexpr int64_t k_auto = -1;
  int64_t budget_ = 0, topk_ = 4;  // budget: 0 static, > 0 fixed, k_auto chosen per round
  std::vector<at::Tensor> levels_;  // static: each depth's node tokens, [n] int64 in node order
  const std::vector<double>* profile_ = nullptr;  // [rows] verify ms for 1..64 fed rows (auto)
  std::shared_ptr<const CostTable> costs_;        // adaptive_gamma=cost: the controller's verify curve (auto)
  double ms_draft_ = -1;                          // EMA of a round's draft time (auto)
  DraftStop stop_;                                 // draft_stop
  int64_t n_rounds_ = 0, n_nodes_ = 0;            // for report()
  std::vector<at::Tensor> level_logp_;            // static, draft_stop: each depth's path log-probabilities
  // This round's tree (all expanded candidates), the nodes fed so far (feed order), and for
  // each proposed node its index in nodes_.
  std::vector<Node> nodes_;
  std::vector<int32_t> fed_order_, proposed_;
  // The round in progress: its sequence, the root's device, where the last depth's nodes begin
  // in nodes_, and the frontier fed at the current depth.
  const Tokens* seq_ = nullptr;
  at::Device device_ = at::kCPU;
  size_t level_begin_ = 0;
  std::vector<int32_t> frontier_;
  // Dynamic: each depth's candidates, on the source's device: token, path log-probability
  // (float64, as the host sums them), parent (index among the depth above; -1: the root) and
  // feed index (-1: not fed); the current depth's frontier (indices into the last one) and the
  // count fed so far.
  struct Candidates {
    at::Tensor ids, logp, parent, fed;
  };
  std::vector<Candidates> cands_;
  // Every depth's candidates in one list, depth by depth, parents as indices into it.
  Candidates all_candidates() const;
  at::Tensor sel_;
  int64_t n_fed_ = 0;
  // keep_on_device: each proposed node's feed index (-1: not fed), on the host once the round's
  // verdict has been read (observe() looks there).
  at::Tensor kept_fed_;
};

void TreeDrafter::expand(const at::Tensor& rows, const std::vector<int32_t>& parents, int64_t k) {
  const int64_t F = static_cast<int64_t>(parents.size());
  at::Tensor row_nodes;  // the node each row follows, as the penalty takes it
  if (cfg_.repetition_penalty != 1.0)
    row_nodes = model::to_device_async(at::tensor(std::vector<int64_t>(parents.begin(), parents.end())), device_);
  // [F, V] on the source's device, after the processors (each row after its own path)
  const at::Tensor all = cfg_.greedy() ? at::log_softmax(sampling::process_logits(rows, cfg_, *seq_, paths(row_nodes)), 1)
                                       : sampling::probabilities(rows, cfg_, *seq_, paths(row_nodes));
  // The children, on the device: the top k of each row by value (greedy: argmax first; ties to
  // the lower id), or k independent draws per row, duplicates kept (multi-draft verification),
  // by the lanes' inverse CDF (sampling::pick_tokens), the uniforms in the order the draws take.
  // kk children per row whatever their tokens (-1: a draw without mass, named by the verdict's
  // read).
  const int64_t kk = cfg_.greedy() ? std::min<int64_t>(k, all.size(1)) : k;
  at::Tensor own;  // draft_stop: each child's own log-probability, [F, kk]
  if (cfg_.greedy()) {
    const auto top = at::topk(all, kk, 1);
    levels_.push_back(std::get<1>(top).reshape({-1}));
    own = std::get<0>(top);
  } else {
    std::vector<double> u(F * k);
    for (double& x : u) x = rng_.uniform();
    const at::Tensor rows_k = all.repeat_interleave(k, 0), picks = sampling::pick_tokens(rows_k, u);
    levels_.push_back(picks);
    if (stop_.on())
      own = at::log(rows_k.gather(1, picks.clamp_min(0).unsqueeze(1)))
                .masked_fill(picks.unsqueeze(1) < 0, -std::numeric_limits<double>::infinity())
                .reshape({F, k});
  }
  if (stop_.on()) {  // the path's: its parent's (the frontier is the whole depth above, in order) + its own
    const at::Tensor up = level_logp_.empty() ? at::zeros({F}, own.options()) : level_logp_.back();
    level_logp_.push_back((up.unsqueeze(1) + own).reshape({-1}));
  }
  for (int64_t r = 0; r < F * kk; ++r)
    nodes_.push_back({-1, parents[r / kk], 0.0, cfg_.greedy() ? at::Tensor() : all[r / kk], -1});
}

TreeSource::Feed TreeDrafter::feed_of(const std::vector<int32_t>& ids, int64_t depth) {
  // A static tree feeds its whole last depth: those tokens, as they are on the device.
  SD_CHECK(static_cast<int64_t>(ids.size()) == levels_.back().size(0),
           "tree drafter: a static tree feeds its whole last depth (internal error)");
  const int64_t n_cached = static_cast<int64_t>(fed_order_.size());
  std::vector<int32_t> slot_of(nodes_.size(), -1);  // node -> feed order
  for (size_t f = 0; f < fed_order_.size(); ++f) slot_of[fed_order_[f]] = static_cast<int32_t>(f);
  for (int32_t id : ids) {
    slot_of[id] = static_cast<int32_t>(fed_order_.size());
    nodes_[id].fed = static_cast<int64_t>(fed_order_.size());
    fed_order_.push_back(id);
  }
  std::vector<int64_t> parent;  // each new node's parent's feed index (-1: the root)
  for (int32_t id : ids) parent.push_back(nodes_[id].parent < 0 ? -1 : slot_of[nodes_[id].parent]);
  TreeSource::Feed f;
  f.depth = depth;
  f.n_cached = n_cached;
  f.tokens = levels_.back().clamp_min(0);
  f.parent = model::to_device_async(at::tensor(parent, at::kLong), device_);
  return f;
}

std::tuple<at::Tensor, at::Tensor> TreeDrafter::best_children(const at::Tensor& rows, const at::Tensor& row_nodes) const {
  const at::Tensor logp = at::log_softmax(sampling::process_logits(rows, cfg_, *seq_, paths(row_nodes)), 1);
  return at::topk(logp, std::min<int64_t>(topk_, logp.size(1)), 1);
}

TreeDrafter::Candidates TreeDrafter::all_candidates() const {
  std::vector<at::Tensor> ids, logp, parent, fed;
  int64_t above = 0, total = 0;  // where the depth above begins in the concatenation; candidates so far
  for (const Candidates& l : cands_) {
    ids.push_back(l.ids);
    logp.push_back(l.logp);
    parent.push_back(at::where(l.parent < 0, l.parent, l.parent + above));  // -1, or an index over all depths
    fed.push_back(l.fed);
    above = total;
    total += l.ids.size(0);
  }
  return {at::cat(ids), at::cat(logp), at::cat(parent), at::cat(fed)};
}

sampling::DeviceDraft TreeDrafter::paths(const at::Tensor& row_nodes) const {
  sampling::DeviceDraft d;
  if (!row_nodes.defined()) return d;  // no repetition penalty
  d.rows = row_nodes;
  if (budget_ == 0 && !levels_.empty()) {
    std::vector<int64_t> parents;
    for (const Node& node : nodes_) parents.push_back(node.parent);
    d.tokens = at::cat(levels_);
    d.parents = model::to_device_async(at::tensor(parents), device_);
  } else if (budget_ != 0 && !cands_.empty()) {
    const Candidates all = all_candidates();
    d.tokens = all.ids;
    d.parents = all.parent;
  }
  return d;
}

void TreeDrafter::add_candidates(const at::Tensor& ids, const at::Tensor& logp, const at::Tensor& parent) {
  const at::Tensor lp = logp.reshape(-1);
  cands_.push_back({ids.reshape(-1), at::where(at::isfinite(lp), lp, -std::numeric_limits<double>::infinity()),
                    parent, at::full({lp.size(0)}, -1, ids.options())});
}

// The one read: every depth's candidates; the unlikely (-inf) ones, and those below them, drop.
void TreeDrafter::read_candidates() {
  std::vector<at::Tensor> ints, logps;
  for (const Candidates& l : cands_) {
    ints.push_back(at::stack({l.ids, l.parent, l.fed}));
    logps.push_back(l.logp);
  }
  const at::Tensor lp_host = model::to_host_async(at::cat(logps));  // comes with the read below
  const at::Tensor int_host = model::on_host(at::cat(ints, 1));
  const double* lp = lp_host.data_ptr<double>();
  const auto x = int_host.accessor<int64_t, 2>();
  std::vector<int32_t> above, here;  // a depth's candidates -> their index in nodes_ (-1: dropped)
  int64_t c = 0;
  for (const Candidates& l : cands_) {
    here.assign(static_cast<size_t>(l.ids.size(0)), -1);
    for (size_t j = 0; j < here.size(); ++j, ++c) {
      const int32_t parent = x[1][c] < 0 ? -1 : above[static_cast<size_t>(x[1][c])];
      if (!std::isfinite(lp[c]) || (x[1][c] >= 0 && parent < 0)) continue;
      here[j] = static_cast<int32_t>(nodes_.size());
      nodes_.push_back({static_cast<TokenId>(x[0][c]), parent, lp[c], {}, x[2][c]});
    }
    above.swap(here);
  }
}

void TreeDrafter::reset() {
  nodes_.clear();
  fed_order_.clear();
  proposed_.clear();
  levels_.clear();
  cands_.clear();
  level_logp_.clear();
  kept_fed_ = at::Tensor();
  n_fed_ = 0;
  level_begin_ = 0;
}

int64_t TreeDrafter::begin(const Tokens& seq, int64_t max_depth, const at::Tensor& root) {
  seq_ = &seq;
  device_ = root.device();
  if (grammar_) mask_rows(root.unsqueeze(0), {Tokens()});
  const bool dynamic = budget_ != 0;
  const int64_t shape_depth = dynamic ? max_depth : std::min<int64_t>(max_depth, static_cast<int64_t>(branching_.size()));
  if (dynamic) {
    const at::Tensor follows_root =
        cfg_.repetition_penalty != 1.0 ? at::full({1}, -1, at::TensorOptions().dtype(at::kLong).device(device_)) : at::Tensor();
    const auto top = best_children(root.unsqueeze(0), follows_root);
    const at::Tensor& ids = std::get<1>(top);
    add_candidates(ids, std::get<0>(top).to(at::kDouble), at::full({ids.size(1)}, -1, ids.options()));
  } else {
    expand(root.unsqueeze(0), {-1}, branching_[0]);
  }
  return std::min(shape_depth, source_->max_depth());
}

TreeSource::Feed TreeDrafter::next_feed(int64_t d) {
  if (budget_ == 0) {  // static: the nodes of the last depth
    frontier_.resize(nodes_.size() - level_begin_);
    std::iota(frontier_.begin(), frontier_.end(), static_cast<int32_t>(level_begin_));
    return feed_of(frontier_, d);
  }
  // The frontier: the depth's tree_topk likeliest paths (ties: the earlier node), in node order.
  Candidates& up = cands_.back();
  const int64_t n = up.ids.size(0);
  sel_ = at::arange(n, up.ids.options());
  if (n > topk_) sel_ = std::get<0>(at::sort(std::get<1>(at::sort(up.logp, true, 0, true)).narrow(0, 0, topk_)));
  const int64_t F = sel_.size(0);
  up.fed.index_copy_(0, sel_, at::arange(n_fed_, n_fed_ + F, sel_.options()));
  TreeSource::Feed f;
  f.tokens = up.ids.index_select(0, sel_);
  f.parent =  // each frontier node's parent's feed index (-1: the root)
      cands_.size() == 1 ? at::full({F}, -1, sel_.options())
                         : cands_[cands_.size() - 2].fed.index_select(0, up.parent.index_select(0, sel_));
  f.depth = d;
  f.n_cached = n_fed_;
  n_fed_ += F;
  return f;
}

void TreeDrafter::take(int64_t d, const at::Tensor& logits) {
  if (grammar_) mask_rows(logits, frontier_paths());
  if (budget_ == 0) {
    level_begin_ = nodes_.size();
    expand(logits, frontier_, branching_[d]);
    return;
  }
  at::Tensor row_nodes;  // the frontier as indices into all_candidates(), for the penalty
  if (cfg_.repetition_penalty != 1.0) {
    int64_t above = 0;
    for (size_t l = 0; l + 1 < cands_.size(); ++l) above += cands_[l].ids.size(0);
    row_nodes = sel_ + above;
  }
  const auto next = best_children(logits, row_nodes);
  const int64_t kk = std::get<1>(next).size(1);
  const at::Tensor logp = cands_.back().logp.index_select(0, sel_).unsqueeze(1) + std::get<0>(next).to(at::kDouble);
  add_candidates(std::get<1>(next), logp, sel_.repeat_interleave(kk));
}

bool TreeDrafter::stops() {
  if (!stop_.on()) return false;
  const at::Tensor& logp = budget_ == 0 ? level_logp_.back() : cands_.back().logp;
  return stop_.cut(logp.numel() > 0 ? std::exp(logp.max().item<double>()) : 0.0);
}

void TreeDrafter::count_round(int64_t nodes) {
  ++n_rounds_;
  n_nodes_ += nodes;
}

// The nodes its shape gives a tree of this depth: a static tree's, a fixed budget's (or the
// candidates, if fewer); tree_budget = auto: the depth, as a chain (the controller then measures
// what its rounds propose).
double TreeDrafter::rows_at(int64_t depth) const {
  const int64_t d = std::min(depth, source_->max_depth());
  if (d <= 0) return 0;
  if (budget_ == k_auto) return double(d);
  if (budget_ > 0) return double(std::min(budget_, topk_ + (d - 1) * topk_ * topk_));  // the root's topk, then topk x topk a depth
  int64_t level = 1, total = 0;
  for (int64_t i = 0; i < std::min<int64_t>(d, static_cast<int64_t>(branching_.size())); ++i) total += (level *= branching_[i]);
  return double(total);
}

DraftProposal TreeDrafter::end(const Stopwatch& round, PhaseClock& clock, DraftProposal out) {
  if (budget_ > 0 && !grammar_) return keep_on_device(clock, std::move(out));
  if (budget_ != 0) read_candidates();
  else if (grammar_) read_level();
  std::vector<int32_t> keep(nodes_.size());  // static: every node
  std::iota(keep.begin(), keep.end(), 0);
  const int64_t budget = budget_ == k_auto ? choose_budget(round.ms()) : budget_;
  if (budget_ != 0 && static_cast<int64_t>(keep.size()) > budget) {
    // A child is never likelier than its parent and ties go to the lower (earlier) index, so
    // the budget's best nodes include every kept node's ancestors.
    std::stable_sort(keep.begin(), keep.end(), [&](int32_t a, int32_t b) { return nodes_[a].logp > nodes_[b].logp; });
    keep.resize(budget);
    std::sort(keep.begin(), keep.end());
  }
  clock.charge(&PhaseTimes::sample);
  out = finish(std::move(keep), clock, std::move(out));
  if (grammar_) {  // without the nodes off the grammar
    const std::vector<int32_t> kept = keep_admitted(out, grammar_, *seq_);
    std::vector<int32_t> proposed;
    for (int32_t k : kept) proposed.push_back(proposed_[k]);
    proposed_ = std::move(proposed);
  }
  count_round(static_cast<int64_t>(proposed_.size()));
  return out;
}

void TreeDrafter::mask_rows(const at::Tensor& rows, const std::vector<Tokens>& paths) {
  for (size_t r = 0; r < paths.size(); ++r) {
    Tokens path = *seq_;
    path.insert(path.end(), paths[r].begin(), paths[r].end());
    grammar_.state->mask_draft(rows[static_cast<int64_t>(r)], path);
  }
}

void TreeDrafter::read_level() {
  const at::Tensor ids = model::on_host(levels_.back()).contiguous();
  for (int64_t j = 0; j < ids.size(0); ++j) nodes_[level_begin_ + j].token = static_cast<TokenId>(ids[j].item<int64_t>());
}

std::vector<Tokens> TreeDrafter::frontier_paths() {
  std::vector<Tokens> paths;
  if (budget_ == 0) {  // the static frontier: the last depth, read first
    read_level();
    for (int32_t id : frontier_) {
      Tokens p;
      for (int32_t n = id; n >= 0; n = nodes_[n].parent) p.push_back(nodes_[n].token);
      paths.emplace_back(p.rbegin(), p.rend());
    }
    return paths;
  }
  std::vector<at::Tensor> ids, parent;  // each depth's, on the host
  for (const Candidates& l : cands_) {
    ids.push_back(model::on_host(l.ids).contiguous());
    parent.push_back(model::on_host(l.parent).contiguous());
  }
  const at::Tensor sel = model::on_host(sel_).contiguous();
  for (int64_t r = 0; r < sel.size(0); ++r) {
    Tokens p;
    int64_t j = sel[r].item<int64_t>();
    for (int64_t l = static_cast<int64_t>(cands_.size()) - 1; l >= 0 && j >= 0; --l) {
      p.push_back(static_cast<TokenId>(ids[l][j].item<int64_t>()));
      j = parent[l][j].item<int64_t>();
    }
    paths.emplace_back(p.rbegin(), p.rend());
  }
  return paths;
}

std::vector<DraftProposal> TreeDrafter::grow(const std::vector<TreeDrafter*>& trees,
                                             const std::vector<const Tokens*>& seqs,
                                             const std::vector<int64_t>& max_depth, PhaseTimes& ms) {
  const size_t B = trees.size();
  std::vector<DraftProposal> out(B);
  std::vector<DraftProposal*> outs(B);
  std::vector<TreeSource*> src(B, nullptr);
  TreeSource* any = nullptr;  // the sources' calls go through one of them
  for (size_t b = 0; b < B; ++b) {
    outs[b] = &out[b];
    if (!trees[b]) continue;
    trees[b]->reset();
    if (max_depth[b] > 0) any = src[b] = trees[b]->source_.get();
  }
  if (!any) return out;
  PhaseClock clock(ms);
  const Stopwatch round;
  // A root that feeds a whole prompt (a lazily prefilled draft's first) is prefill, as prefill() is.
  bool prompt = false;
  for (size_t b = 0; b < B; ++b) prompt = prompt || (src[b] && src[b]->cached() == 0 && seqs[b]->size() > 1);
  const std::vector<at::Tensor> roots = any->roots(src, seqs, outs);  // [V] each; undefined: nothing to draft from
  if (prompt)
    clock.charge(&PhaseTimes::prefill);
  else
    ms.draft_catchup += clock.charge(&PhaseTimes::draft);
  std::vector<int64_t> depth(B, 0);
  int64_t deepest = 0;
  for (size_t b = 0; b < B; ++b) {
    if (!src[b] || !roots[b].defined()) continue;
    depth[b] = trees[b]->begin(*seqs[b], max_depth[b], roots[b]);
    deepest = std::max(deepest, depth[b]);
  }
  for (int64_t d = 1; d < deepest; ++d) {
    std::vector<TreeSource::Feed> feeds(B);
    bool growing = false;
    for (size_t b = 0; b < B; ++b) {
      if (d < depth[b] && trees[b]->stops()) depth[b] = d;  // draft_stop: no deeper
      if (d < depth[b]) feeds[b] = trees[b]->next_feed(d), growing = true;
    }
    clock.charge(&PhaseTimes::sample);
    if (!growing) break;
    const std::vector<at::Tensor> logits = any->feed_all(src, feeds, outs);  // [frontier, V] each
    clock.charge(&PhaseTimes::draft);
    for (size_t b = 0; b < B; ++b)
      if (d < depth[b]) trees[b]->take(d, logits[b]);
  }
  for (size_t b = 0; b < B; ++b)
    if (depth[b] > 0) out[b] = trees[b]->end(round, clock, std::move(out[b]));
  return out;
}

// The budget's likeliest candidates, chosen where they grew as end() chooses them on the host
// (by path log-probability, ties to the earlier node, so every kept node's ancestors are kept),
// renumbered in node order and left there: the round's verdict reads the tree. Unlike the host's
// choice, candidates the processors ruled out (-inf) are not dropped first: with fewer than the
// budget left they fill its last places. The verifier accepts such a node only as the token the
// target itself picks there, so this costs verify rows, never losslessness.
DraftProposal TreeDrafter::keep_on_device(PhaseClock& clock, DraftProposal out) {
  const Candidates all = all_candidates();
  const int64_t total = all.ids.size(0);
  const int64_t K = std::min(budget_, total);
  const at::Tensor order = std::get<1>(at::sort(all.logp, /*stable=*/true, 0, /*descending=*/true));
  const at::Tensor keep = std::get<0>(at::sort(order.narrow(0, 0, K)));  // [K] candidate indices, ascending
  at::Tensor index_of = at::full({total + 1}, -1, keep.options());  // entry `total`: the root's -1
  index_of.index_copy_(0, keep, at::arange(K, keep.options()));
  const at::Tensor up = all.parent.index_select(0, keep);
  out.hold_tree(all.ids.index_select(0, keep), index_of.index_select(0, up.masked_fill(up < 0, total)));
  kept_fed_ = model::to_host_async(all.fed.index_select(0, keep));
  count_round(K);
  clock.charge(&PhaseTimes::sample);
  return out;
}

// The proposal: kept nodes renumbered in their (topological) order, with q rows if drawn.
DraftProposal TreeDrafter::finish(std::vector<int32_t> keep, PhaseClock& clock, DraftProposal out) {
  std::vector<int32_t> index_of(nodes_.size(), -1);
  std::vector<at::Tensor> q_rows;
  for (size_t i = 0; i < keep.size(); ++i) {
    const Node& node = nodes_[keep[i]];
    index_of[keep[i]] = static_cast<int32_t>(i);
    if (budget_ != 0 || grammar_) out.tokens.push_back(node.token);
    out.parents.push_back(node.parent < 0 ? -1 : index_of[node.parent]);
    SD_CHECK(node.parent < 0 || index_of[node.parent] >= 0, "tree drafter: kept node ", keep[i],
             " lost its parent (internal error)");
    if (node.q.defined()) q_rows.push_back(node.q.unsqueeze(0));
  }
  if (budget_ == 0 && !grammar_) out.hold_drawn(levels_);  // static: every node is kept, in level order
  proposed_ = std::move(keep);
  if (!q_rows.empty() && q_rows.size() == proposed_.size()) out.q = at::cat(q_rows, 0).contiguous();  // [N, V]
  clock.charge(&PhaseTimes::logits_copy);
  return out;
}

// Sequoia-style: the budget B maximising (1 + sum of the B likeliest path probabilities) /
// (draft time + verify time of B + 1 rows). The draft time is an average over rounds.
int64_t TreeDrafter::choose_budget(double ms_draft) {
  ms_draft_ = ms_draft_ < 0 ? ms_draft : 0.8 * ms_draft_ + 0.2 * ms_draft;
  std::vector<double> prob;
  for (const Node& node : nodes_) prob.push_back(std::exp(node.logp));
  std::sort(prob.rbegin(), prob.rend());
  const int64_t max_b = std::min<int64_t>(static_cast<int64_t>(prob.size()), k_profile_rows - 1);
  // The controller's measured curve once it has two row counts, else the profile.
  const StepCosts curve = costs_ ? costs_->now() : StepCosts();
  const bool measured = curve.verify_ms.size() >= 2;
  int64_t best_b = 1;
  double best_rate = -1, expected = 1;
  for (int64_t b = 1; b <= max_b; ++b) {
    expected += prob[b - 1];
    const double rate = expected / (ms_draft_ + (measured ? curve.verify_at(b + 1) : (*profile_)[b]));  // b + 1 rows
    if (rate > best_rate) best_rate = rate, best_b = b;
  }
  return best_b;
}

void TreeDrafter::report(std::map<std::string, double>& out) const {
  if (n_rounds_ > 0) out["tree_nodes_mean"] = double(n_nodes_) / double(n_rounds_);
  stop_.report(out);
  if (profile_)
    for (int64_t rows = 1; rows <= k_profile_rows; rows *= 2)
      out["verify_ms_rows_" + std::to_string(rows)] = (*profile_)[rows - 1];
}

void TreeDrafter::observe(const Round& round) {
  std::vector<int64_t> fed;
  for (int32_t node : round.accepted) {
    SD_CHECK(!kept_fed_.defined() || node < kept_fed_.size(0), "tree drafter: accepted node ", node,
             " is outside the proposal (internal error)");
    const int64_t f = kept_fed_.defined() ? kept_fed_.data_ptr<int64_t>()[node] : nodes_[proposed_.at(node)].fed;
    if (f < 0) break;  // a path's fed nodes are a prefix of it
    fed.push_back(f);
  }
  source_->observe(round, fed);
}

// A batch's tree drafters, one per slot, grown in lockstep (TreeDrafter::grow).
class TreeBatchDrafter : public BatchDrafter {
 public:
  TreeBatchDrafter(TreeSourceOf source_of, int64_t batch) : source_of_(std::move(source_of)), slots_(batch) {}
  void join(int64_t slot, const DrafterContext& ctx) override {
    slots_.at(slot) = std::make_unique<TreeDrafter>(source_of_(ctx), ctx);
  }
  Drafter& at(int64_t slot) override { return *slots_.at(slot); }
  std::vector<DraftProposal> propose(const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& max_depth,
                                     PhaseTimes& ms) override {
    std::vector<TreeDrafter*> trees;
    for (const auto& t : slots_) trees.push_back(t.get());
    return TreeDrafter::grow(trees, seqs, max_depth, ms);
  }

 private:
  TreeSourceOf source_of_;
  std::vector<std::unique_ptr<TreeDrafter>> slots_;
};

}  // namespace

std::vector<at::Tensor> TreeSource::roots(const std::vector<TreeSource*>& all, const std::vector<const Tokens*>& seqs,
                                          const std::vector<DraftProposal*>& out) {
  std::vector<at::Tensor> rows(all.size());
  for (size_t b = 0; b < all.size(); ++b)
    if (all[b]) rows[b] = all[b]->root(*seqs[b], *out[b]);
  return rows;
}

std::vector<at::Tensor> TreeSource::feed_all(const std::vector<TreeSource*>& all, const std::vector<Feed>& feeds,
                                             const std::vector<DraftProposal*>& out) {
  std::vector<at::Tensor> rows(all.size());
  for (size_t b = 0; b < all.size(); ++b) {
    const Feed& f = feeds[b];
    if (!all[b] || !f.tokens.defined()) continue;
    rows[b] = all[b]->feed_level(f.tokens, f.parent, f.depth, f.n_cached, *out[b]);
  }
  return rows;
}

std::unique_ptr<BatchDrafter> make_tree_batch_drafter(TreeSourceOf source_of, int64_t batch) {
  return std::make_unique<TreeBatchDrafter>(std::move(source_of), batch);
}

std::unique_ptr<Drafter> make_tree_drafter(std::unique_ptr<TreeSource> source, const DrafterContext& ctx) {
  return std::make_unique<TreeDrafter>(std::move(source), ctx);
}

DrafterInfo tree_drafter_info() {
  DrafterInfo info;
  info.name = "tree";
  info.description = "the draft model expands a token tree: static top-k/sampled branching per depth, or "
                     "EAGLE-2-style dynamic growth under a node budget; verified in one target forward";
  declare_params(info,
                 ParamTable<TreeParams>()
                     .field("tree_branching", &TreeParams::branching_text, "4,2,2,1",
                            "static tree: children per node at each depth (its length caps depth)")
                     .field("tree_budget", &TreeParams::budget_text, "0",
                            "dynamic tree: keep this many most likely nodes; auto = the count maximising predicted "
                            "tokens/s from the measured verify cost (0 = static tree_branching)")
                     .field("tree_topk", &TreeParams::topk, "4",
                            "dynamic tree: nodes expanded per depth and children per expanded node")
                     .finish(check_tree_params));
  info.needs_draft_model = true;
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    return make_tree_drafter(std::make_unique<ModelTreeSource>(ctx.request.draft, ctx.capacity), ctx);
  };
  return info;
}

}  // namespace specdec::strategies
