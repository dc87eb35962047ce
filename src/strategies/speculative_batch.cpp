// Batched speculative decoding (speculative.h: speculative_decode_batch). Per sequence it does
// what Speculative::generate does in the same order -- the same drafter built from its own RNG
// (seeded from its Request::seed), the same draft length rule, the same uniforms drawn after the
// draft -- so each sequence's tokens equal its batch-1 run. The batch shares the target forward
// (one tree per sequence where drafters propose trees), the draft model's forwards (BatchDrafter)
// and the verification kernel calls.
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
  Drafter* drafter = nullptr;  // its slot's, in the batch's BatchDrafter
  std::unique_ptr<GammaController> ctl;
  Tokens seq;       // committed tokens; the cache holds all but the last
  Tokens prefill;   // a newcomer's prompt minus its last token, fed with its first round
  DraftProposal d;  // this round's draft
};

// The padded kernel inputs of a group of sequences (`rows`, indices into seqs): W = the
// longest draft; tokens and node counts; p [R, W + 1, V]; q [R, W, V] (with_q); uniforms
// [R, W + 1]. Both kernels read the final sample's uniform from column W, so each sequence's
// last uniform goes there and a row sees exactly the uniforms of its batch-1 call.
struct Packed {
  int64_t W = 0;
  std::vector<int32_t> tokens, n_draft;
  at::Tensor p, q;
  std::vector<float> uniforms;
};

Packed pack(const std::vector<SpecSequence*>& seqs, const std::vector<at::Tensor>& p,
            const std::vector<std::vector<float>>& u, const std::vector<size_t>& rows, bool with_q) {
  Packed k;
  const int64_t R = static_cast<int64_t>(rows.size()), V = p[rows[0]].size(1);
  for (size_t i : rows) k.W = std::max(k.W, seqs[i]->d.size());
  const int64_t W = k.W;
  k.tokens.assign(R * W, 0);
  k.n_draft.resize(R);
  k.uniforms.assign(R * (W + 1), 0.5f);  // entries past a sequence's draft are never read
  const at::TensorOptions on = p[rows[0]].options();
  k.p = at::zeros({R, W + 1, V}, on);
  if (with_q) k.q = at::zeros({R, W, V}, on);
  for (int64_t r = 0; r < R; ++r) {
    const size_t i = rows[r];
    const DraftProposal& d = seqs[i]->d;
    const int64_t n = d.size();
    std::copy(d.tokens.begin(), d.tokens.end(), k.tokens.begin() + r * W);
    k.n_draft[r] = static_cast<int32_t>(n);
    std::copy(u[i].begin(), u[i].begin() + n, k.uniforms.begin() + r * (W + 1));
    k.uniforms[r * (W + 1) + W] = u[i][n];
    k.p[r].narrow(0, 0, n + 1).copy_(p[i]);
    if (with_q) k.q[r].narrow(0, 0, n).copy_(d.q);
  }
  return k;
}

// Verifies a group of chains with the chain kernel (ragged n_draft), one call.
void verify_chains(kernels::Backend& backend, kernels::VerifyMode mode, const std::vector<SpecSequence*>& seqs,
                   const std::vector<at::Tensor>& p, const std::vector<std::vector<float>>& u,
                   const std::vector<size_t>& rows, std::vector<Verdict>& out) {
  const bool with_q = mode == kernels::VerifyMode::sampling || mode == kernels::VerifyMode::block;
  Packed k = pack(seqs, p, u, rows, with_q);
  const int64_t B = static_cast<int64_t>(rows.size()), G = k.W;
  std::vector<int32_t> n_accepted(B, 0), emitted(B * (G + 1), -1);
  kernels::VerifyArgs args;
  args.batch = B;
  args.gamma = G;
  args.vocab = k.p.size(2);
  args.mode = mode;
  args.draft_tokens = k.tokens.data();
  args.n_draft = k.n_draft.data();
  args.q = with_q ? k.q.data_ptr<float>() : nullptr;
  args.p = k.p.data_ptr<float>();
  args.uniforms = k.uniforms.data();
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

// Verifies a group of token trees with the tree kernel (ragged n_nodes), one call.
void verify_trees(kernels::Backend& backend, kernels::VerifyMode mode, const std::vector<SpecSequence*>& seqs,
                  const std::vector<at::Tensor>& p, const std::vector<std::vector<float>>& u,
                  const std::vector<size_t>& rows, std::vector<Verdict>& out) {
  const bool with_q = mode == kernels::VerifyMode::sampling;
  Packed k = pack(seqs, p, u, rows, with_q);
  const int64_t B = static_cast<int64_t>(rows.size()), N = k.W;
  std::vector<int32_t> parents(B * N, -1), n_accepted(B, 0), path(B * N, -1), emitted(B * (N + 1), -1);
  for (int64_t r = 0; r < B; ++r) {
    const std::vector<int32_t>& par = seqs[rows[r]]->d.parents;
    std::copy(par.begin(), par.end(), parents.begin() + r * N);
  }
  kernels::TreeVerifyArgs args;
  args.batch = B;
  args.max_nodes = N;
  args.vocab = k.p.size(2);
  args.mode = mode;
  args.tokens = k.tokens.data();
  args.parents = parents.data();
  args.n_nodes = k.n_draft.data();
  args.q = with_q ? k.q.data_ptr<float>() : nullptr;
  args.p = k.p.data_ptr<float>();
  args.uniforms = k.uniforms.data();
  args.n_accepted = n_accepted.data();
  args.path = path.data();
  args.out_tokens = emitted.data();
  backend.verify_tree(args);
  for (int64_t r = 0; r < B; ++r) {
    Verdict& v = out[rows[r]];
    v.path.assign(path.begin() + r * N, path.begin() + r * N + n_accepted[r]);
    v.emitted.assign(emitted.begin() + r * (N + 1), emitted.begin() + r * (N + 1) + n_accepted[r] + 1);
  }
}

// Verifies one round. p[i]: [k_i + 1, V] processed target rows of sequence i on the target's
// device. Each sequence draws its k_i + 1 uniforms from its own RNG, as Speculative::verify and
// verify_tree do; sequences without a draft sample p[i] row 0 as they do, and the others go to
// the chain or the tree kernel, grouped by verify mode.
std::vector<Verdict> verify_round(kernels::Backend& backend, const SpecBatchSetup& cfg,
                                  const std::vector<SpecSequence*>& seqs, const std::vector<at::Tensor>& p) {
  const size_t n = seqs.size();
  std::vector<Verdict> out(n);
  std::vector<std::vector<float>> u(n);
  std::vector<std::vector<size_t>> chains(4), trees(4);  // by kernels::VerifyMode
  for (size_t i = 0; i < n; ++i) {
    const DraftProposal& d = seqs[i]->d;
    u[i].resize(d.size() + 1);
    for (auto& x : u[i]) x = seqs[i]->rng->uniformf();
    if (d.size() == 0) {  // plain decoding step
      out[i].emitted.push_back(
          sampling::sample_from(model::on_host(p[i]).data_ptr<float>(), p[i].size(1), u[i][0]));
    } else if (d.is_chain()) {
      chains[static_cast<size_t>(chain_verify_mode(cfg.proc, cfg.block_verify, d.q.defined()))].push_back(i);
    } else {
      trees[static_cast<size_t>(tree_verify_mode(cfg.proc, d.q.defined()))].push_back(i);
    }
  }
  for (size_t m = 0; m < chains.size(); ++m) {
    const auto mode = static_cast<kernels::VerifyMode>(m);
    if (!chains[m].empty()) verify_chains(backend, mode, seqs, p, u, chains[m], out);
    if (!trees[m].empty()) verify_trees(backend, mode, seqs, p, u, trees[m], out);
  }
  return out;
}

// What the round's target forward feeds for a sequence: a newcomer's prompt (all but its last
// token), the last committed token, the draft; from cache slot `start`. A tree round also gets
// its parents over those tokens: the prompt's rows as a chain, then the tree from its root.
void target_feed(const SpecSequence& s, Tokens& fed, int64_t& start, std::vector<int32_t>& tree) {
  const int64_t P = static_cast<int64_t>(s.prefill.size());
  fed = s.prefill;
  fed.push_back(s.seq.back());
  fed.insert(fed.end(), s.d.tokens.begin(), s.d.tokens.end());
  start = static_cast<int64_t>(s.seq.size()) - 1 - P;
  if (s.d.is_chain()) return;
  for (int64_t t = 0; t < P; ++t) tree.push_back(static_cast<int32_t>(t - 1));
  for (int32_t parent : tree_forward_options(s.d).parents) tree.push_back(static_cast<int32_t>(parent + P));
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
  BatchSlots slots(requests, B, on_token, phases);
  std::vector<SpecSequence> spec(B);
  const std::unique_ptr<BatchDrafter> drafters =
      make_batch_drafter(resolve_drafter_name(cfg.params, requests[0].draft != nullptr), requests[0], cfg.params,
                         cfg.proc, B, capacity);
  while (true) {
    for (int64_t b : slots.refill()) {  // as Speculative::generate sets up, minus the prefill forward
      const Request& req = requests[slots[b]->request];
      SpecSequence& s = spec[b] = SpecSequence();
      s.rng = std::make_unique<Rng>(req.seed);
      drafters->join(b, DrafterContext{req, cfg.params, cfg.proc, *s.rng, capacity, cfg.gamma_max});
      s.drafter = &drafters->at(b);
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
    std::vector<SpecSequence*> active;
    std::vector<int64_t> slot_of;
    for (int64_t b = 0; b < B; ++b) {
      if (!slots[b]) continue;
      SpecSequence& s = spec[b];
      s.d = std::move(drafts[b]);
      target_feed(s, fed[b], start[b], trees[b]);
      active.push_back(&s);
      slot_of.push_back(b);
    }
    // 2. score: one ragged target forward for every active sequence
    const at::Tensor logits = forward_batch(target, cache, fed, start, trees);  // [B, T, V]
    // A round that prefills a newcomer's prompt counts as prefill, as in autoregressive_decode_batch
    // (the others' verification rows ride along); a pure verification round as verify.
    const bool prefill =
        std::any_of(active.begin(), active.end(), [](const SpecSequence* s) { return !s->prefill.empty(); });
    const double ms_verify = phase.charge(prefill ? &PhaseTimes::prefill : &PhaseTimes::verify);
    // 3. verify: the chains in one kernel call, the trees in another (per verify mode)
    std::vector<at::Tensor> p, rows;
    for (size_t i = 0; i < active.size(); ++i) {
      const SpecSequence& s = *active[i];
      rows.push_back(logits[slot_of[i]].narrow(0, static_cast<int64_t>(s.prefill.size()), s.d.size() + 1));
      p.push_back(s.d.is_chain() ? sampling::probabilities(rows.back(), cfg.proc, s.seq, s.d.tokens)
                                 : tree_probabilities(rows.back(), cfg.proc, s.seq, s.d));  // [k+1, V]
    }
    const std::vector<Verdict> verdicts = verify_round(*backend, cfg, active, p);
    phase.charge(&PhaseTimes::sample);
    for (size_t i = 0; i < active.size(); ++i) {
      SpecSequence& s = *active[i];
      const int64_t b = slot_of[i];
      if (const int64_t top = s.drafter->target_topk(); top > 0) {
        const Tokens scored(fed[b].begin() + static_cast<int64_t>(s.prefill.size()), fed[b].end());
        s.drafter->observe(scored, s.d.is_chain() ? std::vector<int32_t>{} : tree_forward_options(s.d).parents,
                           top_tokens(rows[i], top));
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
