// Batched speculative decoding (loop.h: speculative_decode_batch). Per sequence it does
// what Speculative::generate does in the same order -- the same drafter built with its own RNG
// (seeded with drafter_seed(Request::seed)), the same draft length rule, the same verifier
// uniforms (an RNG seeded with Request::seed), the same verify_round -- so each sequence's
// tokens equal its batch-1 run. The batch shares the target forward (one tree per sequence
// where drafters propose trees), the draft model's forwards (BatchDrafter) and the verification
// kernel calls.
//
// Trained drafters (EAGLE, Medusa) read the target's features: the round's forward returns its
// hidden states too, and each sequence's drafter sees its own rows. Their first draft needs the
// prompt's features, so a newcomer's prompt gets a forward of its own before it drafts (the
// newcomers of one refill share it), where other drafters' prompts ride with the next round.
#include "speculative/loop.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/backend.h"
#include "model/device.h"
#include "speculative/controller.h"
#include "speculative/proposer.h"
#include "speculative/scorer.h"
#include "speculative/verifier.h"
#include "strategies/batch.h"

namespace specdec::strategies {
namespace {

// One sequence's speculative state beside its BatchSequence.
struct SpecSequence {
  std::unique_ptr<Rng> rng;          // the verifier's uniforms (seeded with Request::seed)
  std::unique_ptr<Rng> drafter_rng;  // the drafter's (drafter_seed), owned here: the drafter keeps a reference
  Drafter* drafter = nullptr;  // its slot's, in the batch's BatchDrafter
  std::unique_ptr<GammaController> ctl;
  Tokens seq;       // committed tokens; the cache holds all but the last
  Tokens prefill;   // a newcomer's prompt minus its last token, fed with its first round
  DraftProposal d;  // this round's draft
};

// What the round's target forward feeds for a sequence: a newcomer's prompt (all but its last
// token), the last committed token, the draft; from cache slot `start`. A tree round also gets
// its parents over those tokens: the prompt's rows as a chain, then the tree from its root. A
// draft still on the draft's device (DraftProposal::drawn: a chain or a static tree) is fed from
// there: zeros here until the verdict brings it in (forward_batch's `unread`).
void target_feed(const SpecSequence& s, Tokens& fed, int64_t& start, std::vector<int32_t>& tree) {
  const int64_t P = static_cast<int64_t>(s.prefill.size());
  fed = s.prefill;
  fed.push_back(s.seq.back());
  fed.insert(fed.end(), s.d.tokens.begin(), s.d.tokens.end());
  if (s.d.drawn.defined()) fed.resize(fed.size() + s.d.size(), 0);
  start = static_cast<int64_t>(s.seq.size()) - 1 - P;
  if (s.d.is_chain()) return;
  for (int64_t t = 0; t < P; ++t) tree.push_back(static_cast<int32_t>(t - 1));
  // An unread tree's entries are placeholders here (a chain's): forward_batch's unread_parents.
  if (s.d.drawn_parents.defined()) {
    for (int64_t t = 0; t <= s.d.size(); ++t) tree.push_back(static_cast<int32_t>(P + t - 1));
    return;
  }
  for (int32_t parent : tree_forward_options(s.d, at::kCPU).parents) tree.push_back(static_cast<int32_t>(parent + P));
}

}  // namespace

std::vector<Result> speculative_decode_batch(const SpecBatchSetup& cfg, const std::vector<Request>& requests,
                                             const BatchOptions& options, const BatchTokenCallback& on_token) {
  PhaseTimes phases;  // the batch's; each sequence's share is what accrues while it is in the batch
  PhaseClock phase(phases);
  const int64_t slack = std::max(cfg.gamma_max, k_max_draft_nodes) + 1;
  const int64_t capacity = check_batch(requests, options, slack);
  if (requests.empty()) return {};
  for (size_t i = 0; i < requests.size(); ++i) {
    SD_CHECK(requests[i].backend == requests[0].backend, "speculative batch: request ", i,
             " has another verification backend than request 0 (a batch shares one kernel call)");
    SD_CHECK(requests[i].draft == requests[0].draft, "speculative batch: request ", i,
             " has another draft model than request 0 (a batch shares one drafter)");
  }
  model::CausalLM& target = *requests[0].target;
  const std::shared_ptr<kernels::Backend> backend =
      requests[0].backend ? requests[0].backend : model::backend_of(target.device());
  const int64_t B = std::min<int64_t>(options.batch_size, static_cast<int64_t>(requests.size()));
  model::KVCache cache = target.make_cache(B, capacity);
  BatchSlots slots(requests, B, on_token, phase);
  std::vector<SpecSequence> spec(B);
  const std::unique_ptr<BatchDrafter> drafters =
      make_batch_drafter(cfg.verify.drafter, requests[0], cfg.params, cfg.verify.proc, B, capacity);
  bool features = false;  // the drafters read the target's features (one kind for the whole batch)
  while (true) {
    std::vector<Tokens> prompt_fed(B);  // newcomers' prompts that get their own forward (features)
    for (int64_t b : slots.refill()) {  // as Speculative::generate sets up, minus the prefill forward
      const Request& req = requests[slots[b]->request];
      SpecSequence& s = spec[b] = SpecSequence();
      s.rng = std::make_unique<Rng>(req.seed);
      s.drafter_rng = std::make_unique<Rng>(drafter_seed(req.seed));
      drafters->join(b, DrafterContext{req, cfg.params, cfg.verify.proc, *s.drafter_rng, capacity, cfg.gamma_max});
      s.drafter = &drafters->at(b);
      features = s.drafter->wants_target_features();
      s.ctl = std::make_unique<GammaController>(cfg.adaptive, cfg.gamma, cfg.gamma_max);
      Stats& st = slots[b]->st;
      st.accepted_per_position.assign(cfg.gamma_max, 0);
      st.drafted_per_position.assign(cfg.gamma_max, 0);
      s.seq = req.prompt;
      s.prefill.assign(s.seq.begin(), s.seq.end() - 1);
      if (features) std::swap(prompt_fed[b], s.prefill);
      else s.drafter->prefill(s.prefill);
      ++st.n_target_forwards;  // the prompt's forward (shared with the first round, or the newcomers')
    }
    if (slots.empty()) break;
    phase.charge(&PhaseTimes::setup);
    if (std::any_of(prompt_fed.begin(), prompt_fed.end(), [](const Tokens& t) { return !t.empty(); })) {
      at::Tensor hidden;  // [B, T, d]
      forward_batch(target, cache, prompt_fed, std::vector<int64_t>(B, 0), {}, &hidden);
      for (int64_t b = 0; b < B; ++b) {
        const Tokens& head = prompt_fed[b];
        if (head.empty()) continue;
        spec[b].drafter->observe_features(head, {}, hidden[b].narrow(0, 0, static_cast<int64_t>(head.size())));
        spec[b].drafter->prefill(head);
      }
      phase.charge(&PhaseTimes::prefill);
    }
    // 1. draft for every sequence at once
    std::vector<const Tokens*> seqs(B, nullptr);
    std::vector<int64_t> depth(B, 0);
    for (int64_t b = 0; b < B; ++b) {
      if (!slots[b]) continue;
      seqs[b] = &spec[b].seq;
      depth[b] = std::min(spec[b].ctl->next(), requests[slots[b]->request].stop.max_new_tokens -
                                                   slots[b]->tracker->n_tokens() - 1);
    }
    phase.charge(&PhaseTimes::other);
    PhaseTimes ms_parts;
    std::vector<DraftProposal> drafts = drafters->propose(seqs, depth, ms_parts);
    // The batch's draft time, as ms_verify below is the batch's verify time (gamma control).
    const double ms_draft = phase.charge_parts(ms_parts, &PhaseTimes::draft);
    std::vector<Tokens> fed(B);
    std::vector<int64_t> start(B, 0);
    std::vector<std::vector<int32_t>> trees(B);  // a tree round's parents over fed[b]
    std::vector<at::Tensor> unread(B), unread_parents(B);  // drafts (and tree shapes) still on the draft's device
    std::vector<SpecSequence*> active;
    std::vector<int64_t> slot_of;
    for (int64_t b = 0; b < B; ++b) {
      if (!slots[b]) continue;
      SpecSequence& s = spec[b];
      s.d = std::move(drafts[b]);
      target_feed(s, fed[b], start[b], trees[b]);
      if (s.d.drawn.defined()) unread[b] = s.d.drawn_on(target.device());
      if (s.d.drawn_parents.defined())  // the tree's entries over [last committed, node 0, ...]
        unread_parents[b] =
            tree_forward_options(s.d, target.device()).device_parents + static_cast<int64_t>(s.prefill.size());
      active.push_back(&s);
      slot_of.push_back(b);
    }
    // 2. score: one ragged target forward for every active sequence
    at::Tensor hidden;  // [B, T, d] when the drafters read features
    const at::Tensor logits =  // [B, T, V]
        forward_batch(target, cache, fed, start, trees, features ? &hidden : nullptr, unread, unread_parents);
    // A round that prefills a newcomer's prompt counts as prefill, as in autoregressive_decode_batch
    // (the others' verification rows ride along); a pure verification round as verify.
    const bool prefill =
        std::any_of(active.begin(), active.end(), [](const SpecSequence* s) { return !s->prefill.empty(); });
    const double ms_verify = phase.charge(prefill ? &PhaseTimes::prefill : &PhaseTimes::verify);
    // 3. verify: the chains in one kernel call, the trees in another (per verify mode), each
    //    row processed after the committed text + its own root-to-node path
    std::vector<at::Tensor> p, rows, top_ids;  // top_ids: the target's top tokens, riding with the verdict
    std::vector<const DraftProposal*> ds;
    std::vector<Rng*> rngs;
    for (size_t i = 0; i < active.size(); ++i) {
      const SpecSequence& s = *active[i];
      rows.push_back(logits[slot_of[i]].narrow(0, static_cast<int64_t>(s.prefill.size()), s.d.size() + 1));
      p.push_back(target_probabilities(rows.back(), cfg.verify.proc, s.seq, s.d));  // [k+1, V]
      const int64_t top = s.drafter->target_topk();
      top_ids.push_back(top > 0 ? top_token_ids(rows.back(), top) : at::Tensor());
      ds.push_back(&s.d);
      rngs.push_back(s.rng.get());
    }
    const std::vector<Verdict> verdicts = verify_round(*backend, cfg.verify, ds, p, rngs);
    phase.charge(&PhaseTimes::sample);
    for (size_t i = 0; i < active.size(); ++i) {
      SpecSequence& s = *active[i];
      const int64_t b = slot_of[i];
      if (s.d.drawn.defined()) {  // the verdict's read brought the draft in
        s.d.read_drawn(/*synced=*/true);
        std::copy(s.d.tokens.begin(), s.d.tokens.end(), fed[b].end() - s.d.size());
      }
      if (const int64_t top = s.drafter->target_topk(); top > 0 || hidden.defined()) {  // it learns from the round
        const int64_t P = static_cast<int64_t>(s.prefill.size());
        const Tokens scored(fed[b].begin() + P, fed[b].end());  // the last committed token, then the draft
        const std::vector<int32_t> parents =
            s.d.is_chain() ? std::vector<int32_t>{} : tree_forward_options(s.d, at::kCPU).parents;
        if (top > 0) s.drafter->observe(scored, parents, token_rows(top_ids[i]));
        if (hidden.defined())
          s.drafter->observe_features(scored, parents, hidden[b].narrow(0, P, static_cast<int64_t>(scored.size())));
      }
      phase.charge(&PhaseTimes::draft);
      // 4. accept token by token; 5. roll back the sequence's cache slot and its drafter (a
      //    tree's accepted nodes first move next to the root, node j was fed at slot n + j)
      const Verdict& v = verdicts[i];
      BatchSequence& q = *slots[b];
      const int64_t n = static_cast<int64_t>(s.seq.size());
      for (TokenId t : v.emitted) {
        s.seq.push_back(t);
        if (q.tracker->push(t)) break;
      }
      if (q.st.ms_first_token == 0) q.st.ms_first_token = q.clock.ms();
      q.tracker->flush();
      phase.charge(&PhaseTimes::accept);
      if (!s.d.is_chain() && !v.path.empty()) {
        std::vector<int64_t> keep;
        for (int32_t node : v.path) keep.push_back(n + node);
        cache.compact(b, n, keep);
      }
      cache.truncate(b, std::min(cache.length(b), static_cast<int64_t>(s.seq.size()) - 1));
      s.drafter->commit(static_cast<int64_t>(s.seq.size()) - 1, v.path);
      s.prefill.clear();
      phase.charge(&PhaseTimes::rollback);
      count_round(q.st, s.d, v);
      s.ctl->update(max_depth(s.d), v.n_accepted(), ms_draft, ms_verify);
      if (q.tracker->done() || q.tracker->timed_out()) {
        s.drafter->report(q.st.drafter_stats);
        slots.finish(b);
        spec[b] = SpecSequence();
      }
    }
    phase.charge(&PhaseTimes::other);
  }
  return slots.take_results();
}

}  // namespace specdec::strategies
