// model: a smaller causal LM with its own KV cache (Leviathan et al. 2023; Chen et al. 2023).
// Draft tokens are sampled from q = processors(draft logits) with the drafter's generator
// (argmax when greedy), so the verifier can run lossless rejection sampling against p.
// make_drafter() checks that the draft model exists and shares the target's token ids.
//
// In a batch (speculative/loop.cpp) the sequences' drafts share one KV cache, a slot each, and
// every draft forward serves all slots at once (ragged: each feeds only its own tokens). Each
// row of the packed engine is computed alone, so every slot drafts exactly what it drafts alone.
//
// Structured output (issue 57, item 4; draft_mask, on by default): a slot's matcher of its own
// (sampling::ConstraintState::mask_draft) follows its draft, and each draft row is masked after
// the slot's sequence and the tokens drafted before it, before the processors, as the target's
// rows are: the drafter proposes only tokens the grammar admits, and q is the masked law it drew
// from. The matcher needs each drafted token on the host before the next row: a read per draft
// token (without a constraint the tokens stay unread until the verdict).
//
// The grammar's lead along the chain (speculative's draft_lead, on by default, with forced_tokens
// or jump_forward): where a masked chain's path reaches the grammar's skeleton (a key, a quote,
// a brace), the tokens the round would start with there (ConstraintState::lead_along: forced
// tokens, then the jump-forward text's) join the chain without a draft forward of their own, as
// the round's own lead does at its start; the next forward feeds them beside the drawn token.
// Each has a one-hot q row, the law it was "drawn" from, so verification stays exact; a forced
// token is the token its masked row would have drawn anyway, with the same q. They are read
// on the host (the matcher needs them) and count towards the round's length like draws: the
// chain stays as long as the round asked (its rows the target verifies), with fewer forwards.
//
// Confidence stopping (speculative's draft_stop, off by default; SpecDec++'s rule, Huang et al.
// 2024, with the draft's own probabilities in place of a trained acceptance head): a chain stops
// after a token once the product of the probabilities the draft gave its drawn tokens, its own
// estimate that the whole chain so far is accepted, falls below draft_stop. The round then
// verifies the shorter chain; any length a drafter chooses from its own draws is lossless, and
// q stays the law each kept token was drawn from. Each drafted token's probability is read to
// the host as it is drawn: one small read per draft token (on a GPU a wait each).
//
// A window of the prompt (draft_window, off by default; the drafts of StreamingLLM's cache as in
// MagicDec, Chen et al. 2024, and TriForce, Sun et al. 2024): the draft's first feed keeps the
// sequence's first draft_sink tokens (attention sinks, Xiao et al. 2024) and its last
// draft_window, at consecutive positions, and leaves the middle out, so a long prompt costs the
// draft at most sink + window tokens of prefill. Everything after that first feed is read in
// full. The slot remembers how many tokens it left out (`skip`): cache position i holds the
// sequence's token i below the sink and i + skip from there. Lossless as any draft: the target
// verifies, and q is still the law the draft drew from.
#include <algorithm>

#include "core/error.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "strategies/batch.h"
#include "strategies/common.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "speculative/drafters/model.h"
#include "strategies/param_table.h"

namespace specdec::strategies {
namespace {

constexpr int64_t k_max_sink = 1024;

// The model and layer_skip drafters' own parameters.
struct DraftWindowParams {
  int64_t window = 0, sink = 4;  // draft_window (0: the whole sequence), draft_sink
};

ParamTable<DraftWindowParams> draft_window_params() {
  return ParamTable<DraftWindowParams>()
      .field("draft_window", &DraftWindowParams::window, "0",
             "the model and layer_skip drafters read only the prompt's first draft_sink tokens and its last "
             "draft_window (StreamingLLM-style, as MagicDec's drafts): their prefill costs at most sink + window "
             "tokens, whatever the prompt's length; lossless (0 = the whole prompt)")
      .field("draft_sink", &DraftWindowParams::sink, "4",
             "with draft_window: the prompt's first tokens the draft keeps (attention sinks)")
      .finish([](DraftWindowParams& p) {
        SD_CHECK(p.window >= 0, "drafter model: draft_window must be >= 0 (0 = the whole prompt), got ", p.window);
        SD_CHECK(p.sink >= 0 && p.sink <= k_max_sink, "drafter model: draft_sink must be in [0, ", k_max_sink,
                 "], got ", p.sink);
      });
}

// One sequence's draft: the model it drafts with and the generator its draws come from. Its
// K/V live in slot b of a draft cache (a 1-slot cache of its own in a batch-1 run).
struct DraftSlot {
  std::shared_ptr<model::CausalLM> model;
  Rng* rng = nullptr;
  std::shared_ptr<sampling::ConstraintState> grammar;  // its rows' mask; null: none
  DraftStop stop;         // draft_stop
  bool forced = false, jump = false;  // draft_lead: the grammar's lead along the chain, of these kinds
  int64_t n_lead = 0;                 // lead tokens its chains took (report(): draft_lead_tokens)
  int64_t window = 0, sink = 0;       // draft_window (0: off), draft_sink
  int64_t skip = 0;                   // the sequence's tokens its first feed left out (after the sink)

  // The most tokens its first feed takes (0: all of them).
  int64_t prefill_window() const { return window > 0 ? sink + window : 0; }
  // What the cache lacks of `seq` when it holds `cached` positions. A first feed under a
  // window keeps the sink and the window, and sets `skip`.
  Tokens unfed(const Tokens& seq, int64_t cached) {
    const auto n = static_cast<int64_t>(seq.size());
    if (cached > 0 || prefill_window() == 0 || n <= prefill_window()) {
      SD_CHECK(cached + skip < n, "draft cache (", cached, " positions, ", skip, " tokens left out) is ahead of the "
               "sequence (", n, ")");
      return Tokens(seq.begin() + cached + skip, seq.end());
    }
    skip = n - sink - window;
    Tokens fed(seq.begin(), seq.begin() + sink);
    fed.insert(fed.end(), seq.end() - window, seq.end());
    return fed;
  }
  // The cache length that keeps the sequence's first n tokens.
  int64_t cached_of(int64_t n) const { return n - skip; }
};

DraftSlot make_slot(std::shared_ptr<model::CausalLM> model, const DrafterContext& ctx) {
  const auto& sp = ctx.params.typed<SpeculativeParams>();
  DraftSlot slot{std::move(model), &ctx.rng, draft_grammar(ctx).state, DraftStop{sp.draft_stop}};
  const auto& w = ctx.params.typed<DraftWindowParams>();
  // A round's lead may take the window's last tokens back (rejected): the window outlasts it.
  SD_CHECK(w.window == 0 || w.window > ctx.max_depth, "drafter model: draft_window (", w.window,
           ") must exceed gamma_max (", ctx.max_depth, "), the most tokens a round may take back from it");
  slot.window = w.window;
  slot.sink = w.sink;
  const bool lead = slot.grammar && sp.draft_lead && sp.synthetic.empty();
  slot.forced = lead && sp.forced_tokens;
  slot.jump = lead && sp.jump_forward;
  return slot;
}

// The grammar's lead after a slot's path (its sequence and chain so far, the last draw included):
// appended to the chain, each with a one-hot q row where the chain keeps q. Returns how many.
int64_t append_lead(DraftSlot& slot, int64_t n_vocab, int64_t room, Tokens& path, std::vector<at::Tensor>& drafted,
                    std::vector<at::Tensor>& q_rows) {
  if (!(slot.forced || slot.jump) || room <= 0) return 0;
  const Tokens lead =
      slot.grammar->lead_along(path, n_vocab, room, slot.forced, slot.jump).tokens;
  for (const TokenId t : lead) {
    path.push_back(t);
    drafted.push_back(at::full({1}, static_cast<int64_t>(t), drafted.back().options()));
    if (!q_rows.empty()) q_rows.push_back(at::zeros_like(q_rows.back()).index_fill_(1, drafted.back(), 1.0));
  }
  slot.n_lead += static_cast<int64_t>(lead.size());
  return static_cast<int64_t>(lead.size());
}

// The drafter's stats (Stats::drafter_stats): draft_stops, the chains draft_stop cut short;
// draft_lead_tokens, the grammar's tokens its chains took without a forward.
void report_slot(const DraftSlot& slot, std::map<std::string, double>& out) {
  slot.stop.report(out);
  if (slot.forced || slot.jump) out["draft_lead_tokens"] = static_cast<double>(slot.n_lead);
  if (slot.window > 0) out["draft_window_skipped"] = static_cast<double>(slot.skip);
}

// One forward per distinct model among the slots that feed something (in practice one):
// slot b feeds fed[b] from cache position start[b]. Stores each fed slot's last logits row
// ([V]) in row[b] and counts the forward in out[b]. (A 1-slot cache is a dense forward, which
// every engine takes: forward_batch.)
void forward_slots(model::KVCache& cache, const std::vector<DraftSlot>& slots, const std::vector<Tokens>& fed,
                   const std::vector<int64_t>& start, std::vector<at::Tensor>& row, std::vector<DraftProposal>& out) {
  const int64_t B = static_cast<int64_t>(fed.size());
  std::vector<bool> done(B, false);
  for (int64_t b = 0; b < B; ++b) {
    if (fed[b].empty() || done[b]) continue;
    std::vector<Tokens> group(B);
    for (int64_t c = b; c < B; ++c)
      if (!fed[c].empty() && slots[c].model == slots[b].model) group[c] = fed[c], done[c] = true;
    const at::Tensor logits = forward_batch(*slots[b].model, cache, group, start, 1);  // [B, 1, V]
    for (int64_t c = b; c < B; ++c)
      if (!group[c].empty()) {
        row[c] = logits[c][0];  // its last fed token's
        ++out[c].n_forwards;
      }
  }
}

// Feeds every slot b with feeds_now[b] its last drafted token, which is on the draft's device and is
// not read, at cache position pos[b]: one forward per distinct model among them (as
// forward_slots), the other slots feeding nothing.
void feed_drafted(model::KVCache& cache, const std::vector<DraftSlot>& slots,
                  const std::vector<std::vector<at::Tensor>>& drafted, const std::vector<bool>& feeds_now,
                  const std::vector<int64_t>& pos, std::vector<at::Tensor>& row, std::vector<DraftProposal>& out) {
  const int64_t B = static_cast<int64_t>(slots.size());
  std::vector<bool> done(B, false);
  for (int64_t b = 0; b < B; ++b) {
    if (!feeds_now[b] || done[b]) continue;
    // A token of -1 (no mass to draw from: named when the verdict brings the chain in) must not
    // reach an embedding lookup, where a device would assert: fed as 0 until then.
    const at::Tensor none = at::zeros({1}, drafted[b].back().options());  // slots not fed: never read
    std::vector<at::Tensor> ids(B);  // [1] int64 each
    std::vector<int64_t> from(B), n_fed(B, 0);
    for (int64_t c = 0; c < B; ++c) {
      const bool feeds = !done[c] && feeds_now[c] && slots[c].model == slots[b].model;
      ids[c] = feeds ? drafted[c].back() : none;
      n_fed[c] = feeds ? 1 : 0;
      from[c] = feeds ? pos[c] : cache.length(c);  // a slot feeding nothing keeps its cache
      done[c] = done[c] || feeds;
    }
    model::ForwardOptions opt;
    if (std::any_of(n_fed.begin(), n_fed.end(), [](int64_t f) { return f == 0; })) opt.n_fed = n_fed;
    const at::Tensor tokens = at::cat(ids).clamp_min(0).view({B, 1});  // [B, 1]
    const at::Tensor logits = slots[b].model->forward(tokens, from, cache, opt).logits;  // [B, 1, V]
    for (int64_t c = 0; c < B; ++c)
      if (n_fed[c] > 0) {
        row[c] = logits[c][0];
        check_finite_logits(logits[c], *slots[b].model, nullptr, from[c]);
        ++out[c].n_forwards;
      }
  }
}

// Drafts for every slot b with depth[b] > 0: catch its cache up to the committed sequence
// seqs[b] (1-2 tokens after a round, a newcomer's whole prompt), then draft depth[b] tokens one
// forward each; the last one itself is never fed (the next round may reject it). Each token is
// chosen on the draft's device (sampling::pick_tokens) and fed from there, and the proposals
// keep their tokens there (DraftProposal::drawn) for the target's forward and the verifier: the
// round's verdict brings them in, with no read of their own (a repetition penalty too: it
// takes the tokens drafted so far where they are). Time goes to `ms` by phase (a catch-up
// that feeds a prompt: prefill).
// A slot with draft_stop may end its chain early (depth[b] cut to the tokens it drew). A slot
// with draft_lead adds the grammar's lead after each draw, within depth[b] tokens in all (its
// draws end earlier); the next forward feeds the lead (from the host) with the draw.
std::vector<DraftProposal> draft_slots(model::KVCache& cache, std::vector<DraftSlot>& slots,
                                       const sampling::ProcessorConfig& cfg, const std::vector<const Tokens*>& seqs,
                                       std::vector<int64_t> depth, PhaseTimes& ms) {
  const int64_t B = static_cast<int64_t>(slots.size());
  std::vector<DraftProposal> out(B);
  PhaseClock clock(ms);
  std::vector<Tokens> fed(B);
  std::vector<int64_t> start(B, 0), n(B, 0);
  std::vector<at::Tensor> row(B);                   // [V] each
  std::vector<std::vector<at::Tensor>> q_rows(B);  // [1, V] each
  std::vector<std::vector<at::Tensor>> drafted(B);  // [1] int64 on the draft's device each
  std::vector<std::vector<double>> u(B);           // slot b's uniforms, in the order it draws them
  std::vector<Tokens> path(B);                      // a masked slot's sequence + its draft so far
  std::vector<double> sure(B, 1.0);                 // draft_stop: the chain's own odds of acceptance
  std::vector<int64_t> n_fed(B, 0);                 // chain tokens in the cache (at n[b], n[b] + 1, ...)
  std::vector<int64_t> room(B, 0);                  // draft_lead: chain tokens it may still add (draws and lead)
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (depth[b] <= 0) continue;
    start[b] = cache.length(b);
    fed[b] = slots[b].unfed(*seqs[b], start[b]);
    n[b] = slots[b].cached_of(static_cast<int64_t>(seqs[b]->size()));  // in cache positions
    room[b] = depth[b];
    longest = std::max(longest, depth[b]);
    if (!cfg.greedy())
      for (int64_t i = 0; i < depth[b]; ++i) u[b].push_back(slots[b].rng->uniform());
  }
  forward_slots(cache, slots, fed, start, row, out);
  // A forward that feeds a newcomer's prompt (a batch: the slots' prompts ride along with the
  // catch-up; a lazily prefilled draft: its first proposal) is prefill, as prefill() is.
  bool prompt = false;
  for (int64_t b = 0; b < B; ++b) prompt = prompt || (start[b] == 0 && fed[b].size() > 1);
  if (prompt)
    clock.charge(&PhaseTimes::prefill);
  else
    ms.draft_catchup += clock.charge(&PhaseTimes::draft);
  for (int64_t i = 0; i < longest; ++i) {
    clock.charge(&PhaseTimes::other);
    if (i > 0) {  // the last draw, on the device; a lead after it from the host, with the draw
      std::vector<bool> one(B, false);
      std::vector<Tokens> more(B);
      std::vector<int64_t> pos(B, 0);
      for (int64_t b = 0; b < B; ++b) {
        if (depth[b] <= i) continue;
        const auto unfed = static_cast<int64_t>(drafted[b].size()) - n_fed[b];
        pos[b] = n[b] + n_fed[b];
        if (unfed == 1) one[b] = true;
        else more[b].assign(path[b].end() - unfed, path[b].end());
        n_fed[b] += unfed;
      }
      feed_drafted(cache, slots, drafted, one, pos, row, out);
      forward_slots(cache, slots, more, pos, row, out);
      clock.charge(&PhaseTimes::draft);
    }
    for (int64_t b = 0; b < B; ++b) {
      if (depth[b] <= i) continue;
      DraftSlot& slot = slots[b];
      const bool lead = slot.forced || slot.jump;
      if (slot.grammar) {  // the row after the slot's sequence and its draft so far (read here)
        if (i == 0) path[b] = *seqs[b];
        else if (!lead) path[b].push_back(static_cast<TokenId>(drafted[b].back().item<int64_t>()));
        slot.grammar->mask_draft(row[b], path[b]);
      }
      pick_draft(row[b], cfg, *seqs[b], drafted[b], cfg.greedy() ? 0.0 : u[b][i], q_rows[b]);
      --room[b];
      if (slot.stop.on() && i + 1 < depth[b] && slot.stop.cut_after(sure[b], row[b], q_rows[b], drafted[b].back()))
        depth[b] = i + 1;
      if (lead) {  // draft_lead: the grammar's tokens after this draw join the chain
        path[b].push_back(static_cast<TokenId>(drafted[b].back().item<int64_t>()));
        room[b] -= append_lead(slot, row[b].size(-1), room[b], path[b], drafted[b], q_rows[b]);
        if (room[b] <= 0) depth[b] = i + 1;
      }
    }
    clock.charge(&PhaseTimes::sample);
    longest = *std::max_element(depth.begin(), depth.end());  // a chain may have stopped
  }
  // The drafted tokens stay on the device for the target's forward and the verifier
  // (DraftProposal::drawn), their host copy queued.
  for (int64_t b = 0; b < B; ++b)
    if (!drafted[b].empty()) out[b].hold_drawn(drafted[b]);
  clock.charge(&PhaseTimes::draft);
  bool copied = false;  // greedy drafting keeps no q
  for (int64_t b = 0; b < B; ++b)
    if (!q_rows[b].empty()) {
      out[b].q = at::cat(q_rows[b], 0).contiguous();  // [depth, V]
      copied = true;
    }
  if (copied) clock.charge(&PhaseTimes::logits_copy);
  return out;
}

// A batch-1 run's drafter: a cache of its own.
class ModelDrafter : public Drafter {
 public:
  ModelDrafter(std::shared_ptr<model::CausalLM> draft, const DrafterContext& ctx)
      : slot_{make_slot(std::move(draft), ctx)}, cfg_(ctx.proc), cache_(slot_[0].model->make_cache(1, ctx.capacity)) {}

  // Under a window the first proposal feeds the window of the whole sequence, as a batch's
  // slot does (the window of the prompt but its last token would be another text).
  void prefill(const Tokens& tokens, const at::Tensor&) override {
    if (tokens.empty() || slot_[0].window > 0) return;
    forward_tokens(*slot_[0].model, cache_, tokens.data(), static_cast<int64_t>(tokens.size()), 0);
  }

  // A chain: the accepted path is the cache's own prefix, so dropping the rest is enough.
  void observe(const Round& round) override {
    const int64_t keep = slot_[0].cached_of(round.n_valid);
    if (cache_.length(0) > keep) cache_.truncate(0, keep);
  }
  bool prefill_later() const override { return true; }  // draft_slots feeds from the cache's length
  int64_t prefill_window() const override { return slot_[0].prefill_window(); }

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    if (max_depth <= 0) return {};
    PhaseTimes ms;
    DraftProposal out = std::move(draft_slots(cache_, slot_, cfg_, {&seq}, {max_depth}, ms)[0]);
    out.ms = ms;
    return out;
  }
  bool has_distribution() const override { return true; }
  void report(std::map<std::string, double>& out) const override { report_slot(slot_[0], out); }

 private:
  std::vector<DraftSlot> slot_;  // one
  sampling::ProcessorConfig cfg_;
  model::KVCache cache_;
};

// A batch's drafters: slot b of one shared cache each.
class ModelBatchDrafter : public BatchDrafter {
 public:
  ModelBatchDrafter(DraftModelOf model_of, const std::shared_ptr<model::CausalLM>& base,
                    const sampling::ProcessorConfig& cfg, int64_t batch, int64_t capacity)
      : model_of_(std::move(model_of)), cfg_(cfg), cache_(base->make_cache(batch, capacity)), slots_(batch) {
    for (int64_t b = 0; b < batch; ++b) views_.push_back(std::make_unique<SlotView>(*this, b));
  }

  void join(int64_t slot, const DrafterContext& ctx) override {
    slots_.at(slot) = make_slot(model_of_(ctx), ctx);
    cache_.truncate(slot, 0);  // the slot's earlier sequence
  }
  Drafter& at(int64_t slot) override { return *views_.at(slot); }
  std::vector<DraftProposal> propose(const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& max_depth,
                                     PhaseTimes& ms) override {
    return draft_slots(cache_, slots_, cfg_, seqs, max_depth, ms);
  }

 private:
  // Slot b's Drafter. Its prompt is fed with its first proposal's catch-up, beside the other
  // slots' forwards, so prefill() has nothing to do.
  class SlotView : public Drafter {
   public:
    SlotView(ModelBatchDrafter& owner, int64_t slot) : owner_(owner), slot_(slot) {}
    DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
      std::vector<const Tokens*> seqs(owner_.slots_.size(), nullptr);
      std::vector<int64_t> depth(owner_.slots_.size(), 0);
      seqs[slot_] = &seq;
      depth[slot_] = max_depth;
      PhaseTimes ms;
      DraftProposal out = std::move(owner_.propose(seqs, depth, ms)[slot_]);
      out.ms = ms;
      return out;
    }
    void observe(const Round& round) override {
      const int64_t keep = owner_.slots_[slot_].cached_of(round.n_valid);
      if (owner_.cache_.length(slot_) > keep) owner_.cache_.truncate(slot_, keep);
    }
    bool prefill_later() const override { return true; }
    int64_t prefill_window() const override { return owner_.slots_[slot_].prefill_window(); }
    bool has_distribution() const override { return true; }
    void report(std::map<std::string, double>& out) const override { report_slot(owner_.slots_[slot_], out); }

   private:
    ModelBatchDrafter& owner_;
    int64_t slot_;
  };

  DraftModelOf model_of_;
  sampling::ProcessorConfig cfg_;
  model::KVCache cache_;
  std::vector<DraftSlot> slots_;
  std::vector<std::unique_ptr<SlotView>> views_;
};

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<model::CausalLM> draft, const DrafterContext& ctx) {
  return std::make_unique<ModelDrafter>(std::move(draft), ctx);
}

std::unique_ptr<BatchDrafter> make_model_batch_drafter(DraftModelOf model_of,
                                                       const std::shared_ptr<model::CausalLM>& base,
                                                       const sampling::ProcessorConfig& proc, int64_t batch,
                                                       int64_t capacity) {
  if (!base || !base->ragged_batches()) return nullptr;
  return std::make_unique<ModelBatchDrafter>(std::move(model_of), base, proc, batch, capacity);
}

DrafterInfo model_drafter_info() {
  DrafterInfo info;
  info.name = "model";
  info.description = "a smaller causal LM (--draft) samples each draft token from its processed distribution q";
  info.needs_draft_model = true;
  info.chains_with_q = true;
  declare_params(info, draft_window_params());  // layer_skip reads them too
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    return std::make_unique<ModelDrafter>(ctx.request.draft, ctx);
  };
  info.batch_factory = [](const Request& first, const Params&, const sampling::ProcessorConfig& proc, int64_t batch,
                          int64_t capacity) {
    return make_model_batch_drafter([](const DrafterContext& ctx) { return ctx.request.draft; }, first.draft, proc,
                                    batch, capacity);
  };
  return info;
}

}  // namespace specdec::strategies
