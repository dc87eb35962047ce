// The round loop of speculative decoding (loop.h), written once for every batch size: batch 1
// (Speculative::generate) is one slot. Per sequence each round does, in this order, what the
// papers' loop does (Leviathan et al. 2023; Chen et al. 2023): draft (the sequence's drafter,
// with its own RNG seeded with drafter_seed(Request::seed), up to the controller's draft
// length), score (the target's forward over [last committed, draft...]), verify (verify_round
// with the uniforms of an RNG seeded with Request::seed), accept token by token, roll back. So
// each sequence's tokens equal its batch-1 run. A batch shares the target forward (one tree per
// sequence where drafters propose trees), the draft model's forwards (BatchDrafter) and the
// verification kernel calls. The phase timing lives in the helpers, not in the loop.
//
// Trained drafters (EAGLE, Medusa) read the target's features: the round's forward returns its
// hidden states too, and each sequence's drafter sees its own rows. Their first draft needs the
// prompt's features, so a newcomer's prompt gets a forward of its own before it drafts (the
// newcomers of one refill share it), as every prompt does in a batch of one slot, where other
// drafters' prompts ride with the next round.
#include "speculative/loop.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "sampling/processors.h"
#include "speculative/controller.h"
#include "speculative/proposer.h"
#include "speculative/scorer.h"
#include "speculative/verifier.h"
#include "strategies/batch.h"
#include "strategies/common.h"
#include "strategies/trace.h"

namespace specdec::strategies {
namespace {

// One sequence's speculative state beside its BatchSequence.
struct SpecSequence {
  std::unique_ptr<Rng> rng;            // the verifier's uniforms (seeded with Request::seed), and nothing else
  std::unique_ptr<Rng> drafter_rng;    // the drafter's (drafter_seed), owned here: the drafter keeps a reference
  std::unique_ptr<Rng> synthetic_rng;  // synthetic_acceptance's own: rng's draws stay as without it
  std::vector<Drafter*> drafters;      // its slot's, in each of the batch's BatchDrafters (one per drafter)
  std::vector<bool> lazy;              // each one's draft prefills with its first draft (GammaController::defer_prefill)
  std::vector<bool> started;           // each one has drafted for this sequence (its draft caught up on the prompt)
  size_t arm = 0;                      // this round's drafter (an index into drafters), as the controller chose it
  Drafter* drafter = nullptr;          // drafters[arm]
  int64_t topk = 0;                    // the target's top tokens any of its drafters wants (TargetWants::topk)
  std::unique_ptr<GammaController> ctl;
  int64_t chosen = 0;                  // this round's draft length as the controller chose it
  std::shared_ptr<sampling::ConstraintState> grammar;  // structured output: this sequence's matcher
  const Request* req = nullptr;
  Tokens seq;       // committed tokens; the cache holds all but the last
  Tokens prefill;   // a newcomer's prompt minus its last token, fed with its first round
  int64_t n = 0;    // seq's length when the round was drafted
  sampling::ConstraintState::Lead lead;  // the grammar's forced and jump tokens: the draft's first
  Tokens ahead;     // seq + lead: what the drafter drafts after
  DraftProposal d;  // this round's draft
  at::Tensor logits, hidden;  // the target's rows after [last committed, draft...]: [k + 1, V], features [k + 1, d]
  at::Tensor p, top_ids, best;  // processed rows; the target's top tokens (drafter); argmax of p (synthetic)
  Verdict v;
};

class SpecLoop {
 public:
  SpecLoop(const SpecSetup& cfg, const std::vector<Request>& requests, const BatchOptions& options,
           const BatchTokenCallback& on_token);
  std::vector<Result> run();

 private:
  void join(int64_t b);                           // a newcomer in slot b: RNGs, drafter, controller
  void prefill(const std::vector<int64_t>& newcomers);  // their prompts
  void gather();                                  // the active slots; ends those out of time
  double draft();                                 // 1. -> the round's draft ms
  double score();                                 // 2. -> the round's verify ms
  void verify();                                  // 3.
  void accept(int64_t b);                         // 4.
  void roll_back(int64_t b);                      // 5.
  Round round_of(const SpecSequence& s) const;    // what the drafter is shown of the round
  void close(int64_t b, double ms_draft, double ms_verify);  // statistics, trace, gamma; finished?
  void finish(int64_t b);

  const SpecSetup& cfg_;
  const std::vector<Request>& requests_;
  PhaseTimes phases_;  // the batch's; each sequence's share is what accrues while it is in the batch
  PhaseClock phase_{phases_};
  int64_t capacity_;
  model::CausalLM& target_;
  std::shared_ptr<kernels::Backend> backend_;
  int64_t B_;
  model::KVCache cache_;
  BatchSlots slots_;
  std::vector<SpecSequence> spec_;
  // One per drafter (SpecSetup::drafters); a round's chosen drafter proposes, the others propose
  // nothing and see the round as one they sat out.
  std::vector<std::unique_ptr<BatchDrafter>> drafters_;
  bool features_ = false;  // the drafter reads the target's features (one kind for the whole batch, drafting alone)
  // adaptive_gamma=cost: the tables every controller decides from, one per drafter.
  std::vector<std::shared_ptr<CostTable>> costs_;
  std::vector<int64_t> active_;
  int64_t forward_rows_ = 0;  // the last score() forward's rows over the batch (-1: it fed a prompt too)
  // Per drafter, the slot whose round files the step's draft time (its deepest draft; -1: none).
  std::vector<int64_t> draft_filer_;
};

SpecLoop::SpecLoop(const SpecSetup& cfg, const std::vector<Request>& requests, const BatchOptions& options,
                   const BatchTokenCallback& on_token)
    : cfg_(cfg),
      requests_(requests),
      capacity_(check_batch(requests, options, std::max(cfg.gamma_max, k_max_draft_nodes) + 1)),
      target_(*requests.at(0).target),
      backend_(requests[0].backend ? requests[0].backend : model::backend_of(target_.device())),
      B_(std::min<int64_t>(options.batch_size, static_cast<int64_t>(requests.size()))),
      cache_(target_.make_cache(B_, capacity_)),
      slots_(requests, B_, on_token, phase_),
      spec_(B_) {
  for (size_t i = 0; i < requests.size(); ++i) {
    SD_CHECK(requests[i].backend == requests[0].backend, "speculative batch: request ", i,
             " has another verification backend than request 0 (a batch shares one kernel call)");
    SD_CHECK(requests[i].draft == requests[0].draft, "speculative batch: request ", i,
             " has another draft model than request 0 (a batch shares one drafter)");
  }
  std::string config;  // the resolved parameters: a measured table per configuration
  for (const auto& [key, value] : cfg.params.values()) config += key + "=" + value + ";";
  for (const std::string& name : cfg.drafters) {
    drafters_.push_back(make_batch_drafter(name, requests[0], cfg.params, cfg.verify.proc, B_, capacity_));
    if (cfg.adaptive == GammaMode::cost && cfg.fixed_costs.empty())
      costs_.push_back(CostTable::of_pair(requests[0].target, requests[0].draft, name, config));
  }
  if (cfg.adaptive == GammaMode::cost && !cfg.fixed_costs.empty()) costs_ = cfg.fixed_costs;
}

// The round loop.
std::vector<Result> SpecLoop::run() {
  while (true) {
    const std::vector<int64_t> newcomers = slots_.refill();
    for (int64_t b : newcomers) join(b);
    if (slots_.empty()) break;
    phase_.charge(&PhaseTimes::setup);
    prefill(newcomers);
    gather();
    if (active_.empty()) continue;
    // 1. draft for every sequence at once (the drafter splits its own time)
    const double ms_draft = draft();
    // 2. score: the target sees every sequence's [last, draft...] in one forward -> a next-token
    //    row after the last committed token and after every draft node (a tree: each node sees
    //    its own path)
    const double ms_verify = score();
    // 3. verify, each row processed after the committed text + its own root-to-node path
    verify();
    for (int64_t b : active_) {
      // 4. accept: token by token, so EOS / stop strings inside the block cut it exactly
      accept(b);
      // 5. roll back the slot's cache to the committed prefix; its drafter observes the round
      //    (and rolls back its own state)
      roll_back(b);
      close(b, ms_draft, ms_verify);
    }
    phase_.charge(&PhaseTimes::other);
  }
  std::vector<Result> out = slots_.take_results();
  if (!cfg_.calibrate.empty()) {  // outside the requests' time
    std::vector<StepCosts> tables;
    for (const auto& t : costs_) tables.push_back(t->now());
    StepCosts::write_all(tables, cfg_.calibrate);
  }
  return out;
}

void SpecLoop::join(int64_t b) {
  const Request& req = requests_[slots_[b]->request];
  SpecSequence& s = spec_[b] = SpecSequence();
  s.req = &req;
  s.rng = std::make_unique<Rng>(req.seed);
  s.drafter_rng = std::make_unique<Rng>(drafter_seed(req.seed));
  s.synthetic_rng = std::make_unique<Rng>(req.seed ^ 0x5f3759dfull);
  s.ctl = costs_.empty() ? std::make_unique<GammaController>(cfg_.adaptive, cfg_.gamma, cfg_.gamma_max)
                         : std::make_unique<GammaController>(cfg_.gamma, cfg_.gamma_max, costs_);
  for (size_t j = 0; j < drafters_.size(); ++j) {
    drafters_[j]->join(b, DrafterContext{req, cfg_.params, cfg_.verify.proc, *s.drafter_rng, capacity_, cfg_.gamma_max,
                                         costs_.empty() ? nullptr : costs_[j]});
    s.drafters.push_back(&drafters_[j]->at(b));
    s.ctl->set_shape(j, [d = s.drafters[j]](int64_t g) { return d->rows_at(g); }, s.drafters[j]->deepest());
    features_ = features_ || s.drafters[j]->target_wants().features;
    SD_CHECK(!features_ || drafters_.size() == 1, "speculative: drafters (", cfg_.verify.drafter, "): '",
             cfg_.drafters[j], "' reads the target's features, which a drafter that sits rounds out would miss; "
             "it drafts alone (drafter=", cfg_.drafters[j], ")");
    s.lazy.push_back(s.drafters[j]->prefill_later() && s.ctl->defer_prefill(j, s.drafters[j]->prefill_window()));
    s.started.push_back(false);
    s.topk = std::max(s.topk, s.drafters[j]->target_wants().topk);
  }
  s.drafter = s.drafters[0];
  s.grammar = strategies::start_constraint(req, cfg_.constraint);
  Stats& st = slots_[b]->st;
  st.synthetic_acceptance = cfg_.synthetic;
  st.accepted_per_position.assign(cfg_.gamma_max, 0);
  st.drafted_per_position.assign(cfg_.gamma_max, 0);
  st.gamma_rounds.assign(cfg_.gamma_max + 1, 0);
  s.seq = req.prompt;
  s.prefill.assign(s.seq.begin(), s.seq.end() - 1);
  if (features_) ++st.n_target_forwards;  // the prompt's own forward (else it rides with the first round's)
}

// Newcomers' prompts (all but the last token) ride with their first round's forward, which
// feeds [prompt..., last, draft...]: one forward where plain decoding also does one (its prefill
// gives the first token), and no forward of its own. Only where the drafters read the target's
// features (the first draft needs the prompt's) does the prompt get its own forward first.
// The draft models prefill here (a deferred one with its first draft), timed as prefill.
void SpecLoop::prefill(const std::vector<int64_t>& newcomers) {
  if (newcomers.empty()) return;
  if (!features_) {
    for (int64_t b : newcomers)
      for (size_t j = 0; j < drafters_.size(); ++j) {
        if (spec_[b].lazy[j]) continue;
        spec_[b].drafters[j]->prefill(spec_[b].prefill, {});
        const double ms = phase_.charge(&PhaseTimes::prefill);
        // Measured for the cost table where it is the slot's own (one slot).
        if (!costs_.empty() && B_ == 1) costs_[j]->measure_prefill(static_cast<int64_t>(spec_[b].prefill.size()), ms);
      }
    return;
  }
  std::vector<Tokens> fed(B_);
  for (int64_t b : newcomers) std::swap(fed[b], spec_[b].prefill);
  at::Tensor hidden;  // [B, T, d]
  if (std::any_of(fed.begin(), fed.end(), [](const Tokens& t) { return !t.empty(); }))
    forward_batch(target_, cache_, fed, std::vector<int64_t>(B_, 0), 1, {}, features_ ? &hidden : nullptr);
  phase_.charge(&PhaseTimes::prefill);  // the target's
  for (int64_t b : newcomers)
    for (size_t j = 0; j < drafters_.size(); ++j) {
      const Tokens& head = fed[b];
      if (spec_[b].lazy[j]) continue;
      const bool seen = hidden.defined() && !head.empty();
      spec_[b].drafters[j]->prefill(head, seen ? hidden[b].narrow(0, 0, static_cast<int64_t>(head.size())) : at::Tensor());
      // The draft's, measured for the cost table where it is the slot's own (one slot).
      const double ms = phase_.charge(&PhaseTimes::prefill);
      if (!costs_.empty() && B_ == 1) costs_[j]->measure_prefill(static_cast<int64_t>(head.size()), ms);
    }
}

// A sequence out of time ends before its next round.
void SpecLoop::gather() {
  active_.clear();
  for (int64_t b = 0; b < B_; ++b) {
    if (!slots_[b]) continue;
    if (slots_[b]->tracker->timed_out()) finish(b);
    else active_.push_back(b);
  }
}

double SpecLoop::draft() {
  std::vector<const Tokens*> seqs(B_, nullptr);
  std::vector<int64_t> depth(B_, 0), room(B_, 0);
  for (int64_t b : active_) {
    SpecSequence& s = spec_[b];
    seqs[b] = &s.seq;
    s.lead = {};
    s.n = static_cast<int64_t>(s.seq.size());
    // Never draft past max_new_tokens: the last allowed token comes from the target anyway.
    room[b] = s.req->stop.max_new_tokens - slots_[b]->tracker->n_tokens() - 1;
  }
  phase_.charge(&PhaseTimes::other);
  // Structured output: the tokens the grammar forces come first, for free, then its jump-forward
  // text's tokens, verified (grammar work: part of sample); the drafter drafts after them, as if
  // they were committed (not a drafter reading the target's features: it has none of theirs).
  for (int64_t b : active_) {
    SpecSequence& s = spec_[b];
    if (!s.grammar || !(cfg_.forced_tokens || cfg_.jump_forward) || features_ || !cfg_.synthetic.empty()) continue;
    const Stopwatch sw;
    s.lead = s.grammar->lead(s.seq, target_.config().n_vocab, std::min(room[b], cfg_.gamma_max), cfg_.forced_tokens,
                             cfg_.jump_forward);
    phases_.grammar += sw.ms();
    if (s.lead.tokens.empty()) continue;
    s.ahead = s.seq;
    s.ahead.insert(s.ahead.end(), s.lead.tokens.begin(), s.lead.tokens.end());
    seqs[b] = &s.ahead;
  }
  phase_.charge(&PhaseTimes::sample);
  // The round's drafter and length, knowing the lead it drafts after; in a batch the lengths
  // are then the batch step's (batch_lengths: what every sequence's rows cost the shared step).
  std::vector<BatchSeat> seats;
  for (int64_t b : active_) {
    SpecSequence& s = spec_[b];
    const auto lead = static_cast<int64_t>(s.lead.tokens.size());
    // What it may still emit, as far as the process's finished requests tell (CostTable::expected_left).
    const int64_t left =
        costs_.empty() ? room[b] + 1 : costs_[0]->expected_left(slots_[b]->tracker->n_tokens(), room[b] + 1);
    s.chosen = s.ctl->next(left, s.n, lead);
    s.arm = s.ctl->drafter();
    s.drafter = s.drafters[s.arm];
    if (B_ > 1 && !costs_.empty()) seats.push_back(s.ctl->seat(left, s.n));
  }
  const StepCosts curve = seats.size() > 1 ? costs_[0]->now() : StepCosts();
  if (!curve.verify_ms.empty()) {  // (a fresh table's first round keeps the start value)
    const std::vector<int64_t> g = batch_lengths(seats, curve);
    for (size_t i = 0; i < active_.size(); ++i) {
      SpecSequence& s = spec_[active_[i]];
      if (g[i] < s.chosen) s.ctl->settle(s.chosen = g[i]);
    }
  }
  for (int64_t b : active_)
    depth[b] = std::min(spec_[b].chosen, room[b] - static_cast<int64_t>(spec_[b].lead.tokens.size()));
  phase_.charge(&PhaseTimes::other);
  PhaseTimes parts;
  for (size_t j = 0; j < drafters_.size(); ++j) {  // the drafters not chosen propose at depth 0
    std::vector<int64_t> own(B_, 0);
    for (int64_t b : active_) own[b] = spec_[b].arm == j ? depth[b] : 0;
    std::vector<DraftProposal> drafts = drafters_[j]->propose(seqs, own, parts);
    for (int64_t b : active_)
      if (spec_[b].arm == j) spec_[b].d = std::move(drafts[b]);
  }
  for (int64_t b : active_) prepend_forced(spec_[b].d, spec_[b].lead.tokens);
  // A draft's prefill (its first draft's catch-up: a lazy draft's, or in a batch any draft's),
  // measured over the prompts it fed, in a batch together.
  int64_t prompt_tokens = 0, prompt_arm = -1;
  for (int64_t b : active_) {
    SpecSequence& s = spec_[b];
    if (depth[b] <= 0 || s.started[s.arm]) continue;
    s.started[s.arm] = true;
    prompt_tokens += prefill_fed(static_cast<int64_t>(seqs[b]->size()), s.drafter->prefill_window());
    prompt_arm = static_cast<int64_t>(s.arm);
  }
  if (!costs_.empty() && parts.prefill > 0 && prompt_tokens > 0)
    costs_[prompt_arm]->measure_prefill(prompt_tokens, parts.prefill);
  // The batch's draft time, as the verify time is the batch's (gamma control).
  return phase_.charge_parts(parts, &PhaseTimes::draft) - parts.prefill;
}

// What the round's target forward feeds for a sequence in a batch: a newcomer's prompt (all but
// its last token), the last committed token, the draft; from cache slot `start`. A tree round
// also gets its parents over those tokens: the prompt's rows as a chain, then the tree from its
// root. A draft still on the draft's device (DraftProposal::drawn: a chain or a static tree) is
// fed from there: zeros here, its tokens in forward_batch's `unread`.
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

double SpecLoop::score() {
  if (B_ == 1 && spec_[0].prefill.empty()) {  // one slot, its prompt cached: a plain forward over [last, draft...]
    forward_rows_ = 0;
    SpecSequence& s = spec_[0];
    model::ForwardOptions opt = s.d.is_chain() ? model::ForwardOptions{} : tree_forward_options(s.d, target_.device());
    opt.final_hidden = features_;
    phase_.charge(&PhaseTimes::other);
    const model::ForwardResult r =
        forward_rows(target_, cache_, fed_tokens(s.seq.back(), s.d, target_.device()), s.n - 1, opt);
    s.logits = r.logits;  // [k+1, V], k = d.size()
    s.hidden = r.hidden;
    return phase_.charge(&PhaseTimes::verify);
  }
  std::vector<Tokens> fed(B_);
  std::vector<int64_t> start(B_, 0);
  std::vector<std::vector<int32_t>> trees(B_);  // a tree round's parents over fed[b]
  std::vector<at::Tensor> unread(B_), unread_parents(B_);  // drafts (and tree shapes) still on the draft's device
  bool prefill = false;
  forward_rows_ = 0;
  int64_t rows = 1;  // the logits read: each sequence's last committed token and its draft
  for (int64_t b : active_) {
    const SpecSequence& s = spec_[b];
    forward_rows_ += s.d.size() + 1;
    rows = std::max(rows, s.d.size() + 1);
    target_feed(s, fed[b], start[b], trees[b]);
    if (s.d.drawn.defined()) unread[b] = s.d.drawn_on(target_.device());
    if (s.d.drawn_parents.defined())  // the tree's entries over [last committed, node 0, ...]
      unread_parents[b] =
          tree_forward_options(s.d, target_.device()).device_parents + static_cast<int64_t>(s.prefill.size());
    prefill = prefill || !s.prefill.empty();
  }
  at::Tensor hidden;  // [B, T, d] when the drafters read features
  const at::Tensor logits =  // [B, rows, V]
      forward_batch(target_, cache_, fed, start, rows, trees, features_ ? &hidden : nullptr, unread, unread_parents);
  for (int64_t b : active_) {
    SpecSequence& s = spec_[b];
    const int64_t P = static_cast<int64_t>(s.prefill.size());
    const int64_t read = std::min(P + s.d.size() + 1, rows);  // its rows of the logits
    s.logits = logits[b].narrow(0, read - (s.d.size() + 1), s.d.size() + 1);
    s.hidden = hidden.defined() ? hidden[b].narrow(0, P, s.d.size() + 1) : at::Tensor();
  }
  // A round that prefills a newcomer's prompt counts as prefill, as in autoregressive_decode_batch
  // (the others' verification rows ride along); a pure verification round as verify.
  if (prefill) forward_rows_ = -1;
  return phase_.charge(prefill ? &PhaseTimes::prefill : &PhaseTimes::verify);
}

// The chains in one kernel call, the trees in another (per verify mode). A round in which no
// sequence drafts is, at T = 0, a greedy step: each token is its row's arg-max after the
// processors, taken as greedy takes it, without the probability rows and the kernel call.
void SpecLoop::verify() {
  const bool plain = cfg_.verify.proc.greedy() && cfg_.synthetic.empty() &&
                     std::all_of(active_.begin(), active_.end(),
                                 [&](int64_t b) { return spec_[b].d.size() == 0 && !spec_[b].req->trace; });
  std::vector<at::Tensor> p;
  std::vector<const DraftProposal*> ds;
  std::vector<Rng*> rngs;
  for (int64_t b : active_) {
    SpecSequence& s = spec_[b];
    // Structured output: each row masked first, after its own path (the draft read for it; the
    // drafter's rows stay unmasked: a token the grammar refuses has target probability 0). At
    // T = 0 the verdict reads each row's arg-max alone: a row whose arg-max the grammar admits
    // needs no mask (unless a drafter learns the row's top tokens, or a trace records it).
    if (s.grammar) {
      s.d.read_drawn(/*synced=*/false);
      const Stopwatch sw;
      const bool argmax_only = cfg_.verify.proc.greedy() && cfg_.synthetic.empty() && s.topk == 0 && !s.req->trace;
      slots_[b]->st.n_refused +=
          s.grammar->mask(s.logits, s.seq, s.d.tokens, s.d.parents, argmax_only ? &cfg_.verify.proc : nullptr);
      phases_.grammar += sw.ms();
    }
    // the target's top tokens ride with the verdict
    s.top_ids = s.topk > 0 ? top_token_ids(s.logits, s.topk) : at::Tensor();
    if (plain) continue;
    s.p = target_probabilities(s.logits, cfg_.verify.proc, s.seq, s.d);  // [k+1, V]
    s.best = !cfg_.synthetic.empty() ? top_token_ids(s.p, 1) : at::Tensor();  // likewise
    p.push_back(s.p);
    ds.push_back(&s.d);
    rngs.push_back(s.rng.get());
  }
  if (plain) {  // every sequence's token in one read, as a verdict would bring them
    std::vector<at::Tensor> rows;
    std::vector<const Tokens*> contexts;
    for (int64_t b : active_) {
      rows.push_back(spec_[b].logits[0]);
      contexts.push_back(&spec_[b].seq);
    }
    const std::vector<TokenId> picks = sampling::greedy_tokens(rows, cfg_.verify.proc, contexts);
    for (size_t i = 0; i < active_.size(); ++i) {
      SpecSequence& s = spec_[active_[i]];
      s.p = at::Tensor();
      s.v = Verdict{{}, {picks[i]}, std::nullopt};
    }
    phase_.charge(&PhaseTimes::sample);
    return;
  }
  std::vector<Verdict> verdicts = verify_round(*backend_, cfg_.verify, ds, p, rngs);
  for (size_t i = 0; i < active_.size(); ++i) {
    SpecSequence& s = spec_[active_[i]];
    s.v = std::move(verdicts[i]);
    s.d.read_drawn(/*synced=*/true);  // the verdict's read brought them
    if (!cfg_.synthetic.empty()) s.v = synthetic_verdict(s.d, token_rows(s.best), cfg_.synthetic, *s.synthetic_rng);
  }
  phase_.charge(&PhaseTimes::sample);
}

void SpecLoop::accept(int64_t b) {
  SpecSequence& s = spec_[b];
  BatchSequence& q = *slots_[b];
  for (TokenId t : s.v.emitted) {
    s.seq.push_back(t);
    if (q.tracker->push(t)) break;
  }
  if (q.st.ms_first_token == 0) q.st.ms_first_token = q.clock.ms();
  q.tracker->flush();
  phase_.charge(&PhaseTimes::accept);
}

// All but the newest token stay; a tree's accepted nodes first move next to the root (node j
// was fed at slot n + j).
void SpecLoop::roll_back(int64_t b) {
  SpecSequence& s = spec_[b];
  if (!s.d.is_chain() && !s.v.path.empty()) {
    std::vector<int64_t> keep;
    for (int32_t node : s.v.path) keep.push_back(s.n + node);
    cache_.compact(b, s.n, keep);
  }
  cache_.truncate(b, std::min(cache_.length(b), static_cast<int64_t>(s.seq.size()) - 1));
  s.prefill.clear();
  phase_.charge(&PhaseTimes::rollback);
  // Its own rollback and learning count as the drafter's time; it sees its own nodes only. The
  // drafters that sat the round out see it as a round they proposed nothing in.
  const Round round = round_of(s);
  for (Drafter* d : s.drafters) d->observe(d == s.drafter ? drafter_round(round, static_cast<int64_t>(s.lead.tokens.size()))
                                                          : sat_out(round));
  phase_.charge(&PhaseTimes::draft);
}

// The round's outcome, and the target's rows where the drafter wants them: those of the token
// that was last when the round was drafted, then of the draft's nodes (on the host now: the
// verdict brought an unread draft in).
Round SpecLoop::round_of(const SpecSequence& s) const {
  Round r;
  r.n_valid = static_cast<int64_t>(s.seq.size()) - 1;
  r.accepted = s.v.path;
  if (s.topk == 0 && !s.hidden.defined()) return r;
  r.rows.fed = {s.seq[s.n - 1]};
  r.rows.fed.insert(r.rows.fed.end(), s.d.tokens.begin(), s.d.tokens.end());
  if (!s.d.is_chain()) r.rows.parents = tree_forward_options(s.d, at::kCPU).parents;
  if (s.topk > 0) r.rows.topk = token_rows(s.top_ids);
  r.rows.hidden = s.hidden;
  return r;
}

void SpecLoop::close(int64_t b, double ms_draft, double ms_verify) {
  SpecSequence& s = spec_[b];
  BatchSequence& q = *slots_[b];
  count_round(q.st, s.d, s.v);
  count_choice(q.st, s.chosen, static_cast<int64_t>(s.seq.size()) - s.n);
  // The masked target puts all its mass on a forced token: every verify mode accepts it. The jump
  // tokens after them were verified like the drafter's.
  const int64_t m = s.lead.n_forced, lead = static_cast<int64_t>(s.lead.tokens.size());
  SD_CHECK(s.v.n_accepted() >= m, "structured output: the target rejected a token the grammar forces (",
           s.v.n_accepted(), " of ", m, " forced tokens accepted): the mask and the forced tokens disagree");
  q.st.n_forced += m;
  q.st.n_jump_drafted += lead - m;
  q.st.n_jump += std::min(s.v.n_accepted(), lead) - m;
  if (s.req->trace) {
    PhaseTimes so_far = phases_;  // the sequence's phase times so far
    so_far -= q.joined;
    s.req->trace->round(s.d, s.p, s.v.path, Tokens(s.seq.begin() + s.n, s.seq.end()), so_far);
  }
  // The controller and the per-drafter counts see the drafter's own tokens (after the lead).
  const int64_t k = max_depth(s.d) - lead, a = std::max<int64_t>(0, s.v.n_accepted() - lead);
  if (drafters_.size() > 1 && s.chosen > 0) {
    Stats::DrafterCounts& mine = q.st.per_drafter[cfg_.drafters[s.arm]];
    ++mine.rounds;
    mine.drafted += k;
    mine.accepted += a;
  }
  // A batch step's costs go to the tables once: the forward's time with the first sequence's
  // round (the batch's rows; one slot: its own rows, 0), unless the forward fed a prompt too (-1),
  // each drafter's with its deepest draft's (a batched draft runs as many forwards as that one).
  // Filed by every sequence, one step's time outweighed all the steps before it in the averages.
  if (b == active_.front()) {  // (the verdict has read every draft by now)
    const auto own_depth = [&](int64_t i) {
      return max_depth(spec_[i].d) - static_cast<int64_t>(spec_[i].lead.tokens.size());
    };
    draft_filer_.assign(drafters_.size(), -1);
    for (int64_t i : active_) {
      int64_t& filer = draft_filer_[spec_[i].arm];
      if (own_depth(i) > 0 && (filer < 0 || own_depth(i) > own_depth(filer))) filer = i;
    }
  }
  const int64_t batch_rows = b != active_.front() ? -1 : B_ > 1 || forward_rows_ < 0 ? forward_rows_ : 0;
  const double draft_ms = b == draft_filer_[s.arm] ? ms_draft : -1;
  s.ctl->update({k, a, draft_ms, ms_verify, lead, s.v.n_accepted() >= lead, batch_rows, s.d.size() - lead});
  if (q.tracker->done() || q.tracker->timed_out()) finish(b);
}

void SpecLoop::finish(int64_t b) {
  for (Drafter* d : spec_[b].drafters) d->report(slots_[b]->st.drafter_stats);
  for (const auto& table : costs_) table->measure_length(slots_[b]->tracker->n_tokens());
  slots_.finish(b);
  spec_[b] = SpecSequence();
}

}  // namespace

std::vector<Result> speculative_decode(const SpecSetup& setup, const std::vector<Request>& requests,
                                       const BatchOptions& options, const BatchTokenCallback& on_token) {
  if (requests.empty()) {
    check_batch(requests, options, 0);
    return {};
  }
  return SpecLoop(setup, requests, options, on_token).run();
}

}  // namespace specdec::strategies
