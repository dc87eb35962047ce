// Batched speculative decoding (speculative.h: speculative_decode_batch). Per sequence it does
// what Speculative::generate does in the same order -- the same drafter built from its own RNG
// (seeded from its Request::seed), the same draft length rule, the same uniforms drawn after the
// draft -- so each sequence's tokens equal its batch-1 run; only the target forward and the
// verification kernel are shared by the batch.
#include <algorithm>

#include "core/error.h"
#include "kernels/backend.h"
#include "model/device.h"
#include "strategies/batch.h"
#include "strategies/speculative.h"

namespace specdec::strategies {
namespace {

// One sequence's speculative state beside its BatchSequence.
struct SpecSequence {
  std::unique_ptr<Rng> rng;  // owned here: the drafter keeps a reference
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<GammaController> ctl;
  Tokens seq;       // committed tokens; the cache holds all but the last
  Tokens prefill;   // a newcomer's prompt minus its last token, fed with its first round
  DraftProposal d;  // this round's draft
  double ms_draft = 0;
};

// Verifies the chains of one round. p[i]: [k_i + 1, V] processed target rows of sequence i on
// the target's device. Each sequence draws its k_i + 1 uniforms from its own RNG, as
// Speculative::verify does; sequences without a draft sample p[i] row 0 as it does, and the
// others go through one kernel call per verify mode (in practice one), with ragged n_draft. The
// kernel takes the final sample's uniform from column gamma: each sequence's last uniform goes
// there, so a row sees exactly the uniforms of its batch-1 call.
std::vector<Verdict> verify_chains(kernels::Backend& backend, const SpecBatchSetup& cfg,
                                   const std::vector<SpecSequence*>& seqs, const std::vector<at::Tensor>& p) {
  const size_t n = seqs.size();
  std::vector<Verdict> out(n);
  std::vector<std::vector<float>> u(n);
  std::vector<std::vector<size_t>> by_mode(4);
  for (size_t i = 0; i < n; ++i) {
    const DraftProposal& d = seqs[i]->d;
    u[i].resize(d.size() + 1);
    for (auto& x : u[i]) x = seqs[i]->rng->uniformf();
    if (d.size() == 0) {  // plain decoding step
      out[i].emitted.push_back(
          sampling::sample_from(model::on_host(p[i]).data_ptr<float>(), p[i].size(1), u[i][0]));
      continue;
    }
    by_mode[static_cast<size_t>(chain_verify_mode(cfg.proc, cfg.block_verify, d.q.defined()))].push_back(i);
  }
  for (size_t m = 0; m < by_mode.size(); ++m) {
    const std::vector<size_t>& rows = by_mode[m];
    if (rows.empty()) continue;
    const int64_t B = static_cast<int64_t>(rows.size()), V = p[rows[0]].size(1);
    int64_t G = 0;
    for (size_t i : rows) G = std::max(G, seqs[i]->d.size());
    kernels::VerifyArgs args;
    args.batch = B;
    args.gamma = G;
    args.vocab = V;
    args.mode = static_cast<kernels::VerifyMode>(m);
    const bool with_q = args.mode == kernels::VerifyMode::sampling || args.mode == kernels::VerifyMode::block;
    std::vector<int32_t> tokens(B * G, 0), n_draft(B), n_accepted(B, 0), emitted(B * (G + 1), -1);
    std::vector<float> uniforms(B * (G + 1), 0.5f);  // columns past a sequence's draft are never read
    const at::TensorOptions on = p[rows[0]].options();
    at::Tensor pb = at::zeros({B, G + 1, V}, on), qb = with_q ? at::zeros({B, G, V}, on) : at::Tensor();
    for (int64_t r = 0; r < B; ++r) {
      const size_t i = rows[r];
      const DraftProposal& d = seqs[i]->d;
      const int64_t k = d.size();
      std::copy(d.tokens.begin(), d.tokens.end(), tokens.begin() + r * G);
      n_draft[r] = static_cast<int32_t>(k);
      std::copy(u[i].begin(), u[i].begin() + k, uniforms.begin() + r * (G + 1));
      uniforms[r * (G + 1) + G] = u[i][k];
      pb[r].narrow(0, 0, k + 1).copy_(p[i]);
      if (with_q) qb[r].narrow(0, 0, k).copy_(d.q);
    }
    args.draft_tokens = tokens.data();
    args.n_draft = n_draft.data();
    args.q = with_q ? qb.data_ptr<float>() : nullptr;
    args.p = pb.data_ptr<float>();
    args.uniforms = uniforms.data();
    args.n_accepted = n_accepted.data();
    args.out_tokens = emitted.data();
    backend.verify(args);
    for (int64_t r = 0; r < B; ++r) {
      Verdict& v = out[rows[r]];
      v.path.resize(n_accepted[r]);
      for (int32_t j = 0; j < n_accepted[r]; ++j) v.path[j] = j;
      v.emitted.assign(emitted.begin() + r * (G + 1), emitted.begin() + r * (G + 1) + n_accepted[r] + 1);
    }
  }
  return out;
}

}  // namespace

std::vector<Result> speculative_decode_batch(const SpecBatchSetup& cfg, const std::vector<Request>& requests,
                                             const BatchOptions& options, const BatchTokenCallback& on_token) {
  PhaseTimes phases;  // the batch's; each sequence's share is what accrues while it is in the batch
  PhaseClock phase(phases);
  const int64_t slack = std::max(cfg.gamma_max, k_max_draft_nodes) + 1;
  const int64_t capacity = check_batch(requests, options, slack);
  if (requests.empty()) return {};
  for (size_t i = 0; i < requests.size(); ++i)
    SD_CHECK(requests[i].backend == requests[0].backend, "speculative batch: request ", i,
             " has another verification backend than request 0 (a batch shares one kernel call)");
  model::CausalLM& target = *requests[0].target;
  const std::shared_ptr<kernels::Backend> backend =
      requests[0].backend ? requests[0].backend : model::backend_of(target.device());
  const int64_t B = std::min<int64_t>(options.batch_size, static_cast<int64_t>(requests.size()));
  model::KVCache cache = target.make_cache(B, capacity);
  BatchSlots slots(requests, B, on_token, phases);
  std::vector<SpecSequence> spec(B);
  while (true) {
    for (int64_t b : slots.refill()) {  // as Speculative::generate sets up, minus the prefill forward
      const Request& req = requests[slots[b]->request];
      SpecSequence& s = spec[b] = SpecSequence();
      s.rng = std::make_unique<Rng>(req.seed);
      s.drafter = cfg.make_drafter(req, *s.rng, cache_capacity(req, slack));  // the draft's own caches
      s.ctl = std::make_unique<GammaController>(cfg.adaptive, cfg.gamma, cfg.gamma_max);
      Stats& st = slots[b]->st;
      st.accepted_per_position.assign(cfg.gamma_max, 0);
      st.drafted_per_position.assign(cfg.gamma_max, 0);
      s.seq = req.prompt;
      s.prefill.assign(s.seq.begin(), s.seq.end() - 1);
      s.drafter->prefill(s.prefill);
      ++st.n_target_forwards;  // the prompt's forward (here shared with the first round)
    }
    if (slots.empty()) break;
    phase.charge(&PhaseTimes::setup);
    // 1. draft, sequence by sequence (trees are refused: the batched verification takes chains)
    std::vector<Tokens> fed(B);
    std::vector<int64_t> start(B, 0);
    std::vector<SpecSequence*> active;
    std::vector<int64_t> slot_of;
    for (int64_t b = 0; b < B; ++b) {
      if (!slots[b]) continue;
      SpecSequence& s = spec[b];
      const int64_t gamma = std::min(s.ctl->next(), requests[slots[b]->request].stop.max_new_tokens -
                                                         slots[b]->tracker->n_tokens() - 1);
      phase.charge(&PhaseTimes::other);
      s.d = s.drafter->propose(s.seq, gamma);
      s.ms_draft = phase.charge_parts(s.d.ms, &PhaseTimes::draft);
      SD_CHECK(s.d.is_chain(), "speculative batch: the drafter proposed a token tree; batched verification takes "
               "chains only (use a chain drafter, or batch_size 1)");
      fed[b] = s.prefill;
      fed[b].push_back(s.seq.back());
      fed[b].insert(fed[b].end(), s.d.tokens.begin(), s.d.tokens.end());
      start[b] = static_cast<int64_t>(s.seq.size()) - 1 - static_cast<int64_t>(s.prefill.size());
      active.push_back(&s);
      slot_of.push_back(b);
    }
    // 2. score: one ragged target forward for every active sequence
    const at::Tensor logits = forward_batch(target, cache, fed, start);  // [B, T, V]
    // A round that prefills a newcomer's prompt counts as prefill, as in autoregressive_decode_batch
    // (the others' verification rows ride along); a pure verification round as verify.
    const bool prefill =
        std::any_of(active.begin(), active.end(), [](const SpecSequence* s) { return !s->prefill.empty(); });
    const double ms_verify = phase.charge(prefill ? &PhaseTimes::prefill : &PhaseTimes::verify);
    // 3. verify: every chain in one kernel call
    std::vector<at::Tensor> p, rows;
    for (size_t i = 0; i < active.size(); ++i) {
      const SpecSequence& s = *active[i];
      rows.push_back(logits[slot_of[i]].narrow(0, static_cast<int64_t>(s.prefill.size()), s.d.size() + 1));
      p.push_back(sampling::probabilities(rows.back(), cfg.proc, s.seq, s.d.tokens));  // [k+1, V]
    }
    const std::vector<Verdict> verdicts = verify_chains(*backend, cfg, active, p);
    phase.charge(&PhaseTimes::sample);
    for (size_t i = 0; i < active.size(); ++i) {
      SpecSequence& s = *active[i];
      const int64_t b = slot_of[i];
      if (const int64_t top = s.drafter->target_topk(); top > 0) {
        const Tokens scored(fed[b].begin() + static_cast<int64_t>(s.prefill.size()), fed[b].end());
        s.drafter->observe(scored, {}, top_tokens(rows[i], top));
      }
      phase.charge(&PhaseTimes::draft);
      // 4. accept token by token; 5. roll back the sequence's cache slot and its drafter
      const Verdict& v = verdicts[i];
      BatchSequence& q = *slots[b];
      for (TokenId t : v.emitted) {
        s.seq.push_back(t);
        if (q.tracker->push(t)) break;
      }
      if (q.st.ms_first_token == 0) q.st.ms_first_token = q.clock.ms();
      q.tracker->flush();
      phase.charge(&PhaseTimes::accept);
      cache.truncate(b, std::min(cache.length(b), static_cast<int64_t>(s.seq.size()) - 1));
      s.drafter->commit(static_cast<int64_t>(s.seq.size()) - 1, v.path);
      s.prefill.clear();
      phase.charge(&PhaseTimes::rollback);
      count_round(q.st, s.d, v);
      s.ctl->update(max_depth(s.d), v.n_accepted(), s.ms_draft, ms_verify);
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
