#include "strategies/batch.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "model/checks.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "strategies/trace.h"

namespace specdec::strategies {
namespace {

// One autoregressive step into the request's trace, with the sequence's phase times so far.
void trace_step(TraceRecorder& trace, const at::Tensor& row, const Tokens& context, const BatchSequence& s,
                const PhaseTimes& batch_phases) {
  PhaseTimes so_far = batch_phases;
  so_far -= s.joined;
  trace.step(row, context, so_far);
}

}  // namespace

int64_t check_batch(const std::vector<Request>& requests, const BatchOptions& options, int64_t slack) {
  SD_CHECK(options.batch_size >= 1, "batch: batch_size must be >= 1, got ", options.batch_size);
  SD_CHECK(options.cache_positions >= 0, "batch: cache_positions must be >= 0 (0: sized from the requests), got ",
           options.cache_positions);
  int64_t need_max = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& req = requests[i];
    try {
      check_request(req);
    } catch (const Error& e) {
      fail("batch: request ", i, ": ", e.what());
    }
    SD_CHECK(req.target == requests[0].target, "batch: request ", i,
             " has another target model than request 0 (a batch shares the target's forwards)");
    const int64_t need = cache_capacity(req, slack);
    SD_CHECK(options.cache_positions == 0 || need <= options.cache_positions, "batch: request ", i, " (prompt ",
             req.prompt.size(), " tokens + max_new_tokens ", req.stop.max_new_tokens, " + ", slack + 1,
             " spare) needs ", need, " KV-cache positions, cache_positions is ", options.cache_positions);
    need_max = std::max(need_max, need);
  }
  return options.cache_positions > 0 ? options.cache_positions : need_max;
}

// The default: one request after another, each through generate().
std::vector<Result> Strategy::generate_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                             const BatchTokenCallback& on_token) {
  check_batch(requests, options, 0);
  std::vector<Result> results;
  for (size_t i = 0; i < requests.size(); ++i)
    results.push_back(generate(requests[i], on_token ? TokenCallback([&](const Tokens& t, const std::string& s) {
      on_token(i, t, s);
    }) : TokenCallback()));
  return results;
}

BatchSlots::BatchSlots(const std::vector<Request>& requests, int64_t batch_size, const BatchTokenCallback& on_token,
                       PhaseClock& batch_clock)
    : requests_(requests), on_token_(on_token), clock_(batch_clock), slots_(batch_size),
      results_(requests.size()) {}

std::vector<int64_t> BatchSlots::refill() {
  std::vector<int64_t> filled;
  for (int64_t b = 0; b < size() && next_ < requests_.size(); ++b) {
    while (!slots_[b] && next_ < requests_.size()) {
      auto s = std::make_unique<BatchSequence>();
      s->request = next_++;
      const Request& req = requests_[s->request];
      if (on_token_)
        s->on_token = [this, i = s->request](const Tokens& t, const std::string& text) { on_token_(i, t, text); };
      s->tracker = std::make_unique<StopTracker>(req.stop, req.tokenizer.get(), &s->on_token);
      s->st.n_prompt = static_cast<int64_t>(req.prompt.size());
      // Its span starts where the batch's phase totals are complete, so its share of them and
      // its wall time cover the same interval (the batch's setup so far, for the first ones).
      s->clock = Stopwatch(clock_.last());
      s->joined = clock_.totals();
      slots_[b] = std::move(s);
      if (slots_[b]->tracker->done()) finish(b, &PhaseTimes::setup);  // max_new_tokens = 0: nothing to compute
      else filled.push_back(b);
    }
  }
  return filled;
}

bool BatchSlots::empty() const {
  return next_ == requests_.size() && std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; });
}

void BatchSlots::finish(int64_t slot, double PhaseTimes::*phase) {
  BatchSequence& s = *slots_[slot];
  s.tracker->flush();
  clock_.charge(phase);  // the bookkeeping since the caller's last charge
  s.st.phase_ms = clock_.totals();
  s.st.phase_ms -= s.joined;
  results_[s.request] = make_result(*s.tracker, s.st, s.clock);
  slots_[slot].reset();
}

at::Tensor forward_batch(model::CausalLM& model, model::KVCache& cache, const std::vector<Tokens>& fed,
                         const std::vector<int64_t>& start, int64_t rows, const std::vector<std::vector<int32_t>>& trees,
                         at::Tensor* hidden, const std::vector<at::Tensor>& unread,
                         const std::vector<at::Tensor>& unread_parents) {
  SD_CHECK(rows >= 1, "forward_batch: rows = ", rows, " must be >= 1");
  const int64_t B = static_cast<int64_t>(fed.size());
  int64_t T = 1;
  for (const Tokens& f : fed) T = std::max(T, static_cast<int64_t>(f.size()));
  at::Tensor tokens = at::zeros({B, T}, at::kLong);  // [B, T]; rows past n_fed are never read
  model::ForwardOptions opt;
  std::vector<int64_t> from(B);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(fed[b].begin(), fed[b].end(), tokens.data_ptr<int64_t>() + b * T);
    opt.n_fed.push_back(static_cast<int64_t>(fed[b].size()));
    from[b] = fed[b].empty() ? cache.length(b) : start[b];  // a slot feeding nothing keeps its cache
  }
  if (std::any_of(trees.begin(), trees.end(), [](const std::vector<int32_t>& t) { return !t.empty(); })) {
    // [B * T]: each slot's tree, and chain entries where it has none (or past its feed)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        opt.parents.push_back(t < static_cast<int64_t>(trees[b].size()) ? trees[b][t] : static_cast<int32_t>(t - 1));
  }
  // A dense step (every slot feeds T tokens) needs no n_fed, so engines without ragged
  // batches take it too (a batch of one, for instance).
  if (std::all_of(opt.n_fed.begin(), opt.n_fed.end(), [&](int64_t n) { return n == T; })) opt.n_fed.clear();
  opt.final_hidden = hidden != nullptr;
  opt.logits_last = rows;
  const auto is_unread = [&](int64_t b) { return !unread.empty() && unread[b].defined(); };
  for (int64_t b = 0; b < B; ++b) {
    if (!is_unread(b)) continue;
    if (tokens.is_cpu()) tokens = model::to_device_async(tokens, model.device());
    const int64_t k = unread[b].size(0), n = static_cast<int64_t>(fed[b].size());
    tokens[b].narrow(0, n - k, k).copy_(unread[b]);
  }
  for (int64_t b = 0; b < static_cast<int64_t>(unread_parents.size()); ++b) {
    if (!unread_parents[b].defined()) continue;
    if (!opt.device_parents.defined())
      opt.device_parents = model::to_device_async(at::tensor(opt.parents, at::kInt).to(at::kLong), model.device());
    const int64_t k = unread_parents[b].size(0), n = static_cast<int64_t>(fed[b].size());
    opt.device_parents.narrow(0, b * T + n - k, k).copy_(unread_parents[b]);
  }
  if (opt.device_parents.defined()) opt.parents.clear();
  model::ForwardResult out = model.forward(tokens, from, cache, opt);
  if (hidden) *hidden = out.hidden;  // [B, T, d]
  const at::Tensor logits = model::last_logit_rows(out.logits, opt.n_fed, rows);  // [B, rows, V]
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = static_cast<int64_t>(fed[b].size()), m = std::min(n, rows);
    if (m > 0)
      check_finite_logits(logits[b].narrow(0, 0, m), model, is_unread(b) ? nullptr : fed[b].data() + n - m,
                          from[b] + n - m);
  }
  return logits;
}

// Plain autoregressive decoding, written once for every batch size: autoregressive_decode is
// this loop with one slot.
std::vector<Result> autoregressive_decode_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                                const BatchTokenCallback& on_token, const MakePick& make_pick,
                                                const std::shared_ptr<const sampling::Constraint>& constraint,
                                                const sampling::ProcessorConfig* argmax) {
  PhaseTimes phases;  // the batch's; each sequence's share is what accrues while it is in the batch
  PhaseClock phase(phases);
  const int64_t capacity = check_batch(requests, options, 0);
  if (requests.empty()) return {};
  model::CausalLM& target = *requests[0].target;
  const int64_t B = std::min<int64_t>(options.batch_size, static_cast<int64_t>(requests.size()));
  model::KVCache cache = target.make_cache(B, capacity);
  BatchSlots slots(requests, B, on_token, phase);
  std::vector<PickToken> pick(B);
  std::vector<std::shared_ptr<sampling::ConstraintState>> grammar(B);  // structured output: each one's matcher
  std::vector<Tokens> context(B), fed(B);  // prompt + generated; what the next forward feeds
  phase.charge(&PhaseTimes::setup);
  while (true) {
    const std::vector<int64_t> newcomers = slots.refill();
    for (int64_t b : newcomers) {  // a newcomer's prompt is prefilled in the next forward
      const Request& req = requests[slots[b]->request];
      pick[b] = make_pick(req);
      grammar[b] = start_constraint(req, constraint);
      context[b] = fed[b] = req.prompt;
    }
    if (slots.empty()) break;
    const bool prefill = !newcomers.empty();
    phase.charge(&PhaseTimes::setup);
    std::vector<int64_t> start(B);
    for (int64_t b = 0; b < B; ++b) start[b] = static_cast<int64_t>(context[b].size() - fed[b].size());
    const at::Tensor logits = forward_batch(target, cache, fed, start, 1);  // [B, 1, V]
    // A step that prefills a newcomer counts as prefill, a pure decode step as verify: the phase
    // a speculative round spends in the target, so baseline and candidate breakdowns line up.
    phase.charge(prefill ? &PhaseTimes::prefill : &PhaseTimes::verify);
    for (int64_t b = 0; b < B; ++b) {
      BatchSequence* s = slots[b];
      if (!s) continue;
      const at::Tensor row = logits[b][0];  // [V]: its last fed token's
      if (grammar[b]) {  // the mask first, before every processor (an arg-max it admits: none needed)
        const Stopwatch sw;
        grammar[b]->mask(row.unsqueeze(0), context[b], {}, {}, requests[s->request].trace ? nullptr : argmax);
        phases.grammar += sw.ms();
      }
      const TokenId token = pick[b](row, context[b]);
      phase.charge(&PhaseTimes::sample);
      context[b].push_back(token);
      fed[b] = {token};
      ++s->st.n_target_forwards;
      if (s->st.ms_first_token == 0) s->st.ms_first_token = s->clock.ms();
      const bool stop = s->tracker->push(token);
      s->tracker->flush();
      phase.charge(&PhaseTimes::accept);
      if (const Request& req = requests[s->request]; req.trace) trace_step(*req.trace, row, context[b], *s, phases);
      if (stop || s->tracker->timed_out()) {
        slots.finish(b, &PhaseTimes::accept);  // the last flush, as the stop handling's
        fed[b].clear();
        pick[b] = nullptr;
        grammar[b] = nullptr;
      }
    }
  }
  return slots.take_results();
}

Result autoregressive_decode(const Request& req, const TokenCallback& on_token, const PickToken& pick,
                             const std::shared_ptr<const sampling::Constraint>& constraint,
                             const sampling::ProcessorConfig* argmax) {
  check_request(req);  // its own errors, not the batch's wording
  const std::vector<Request> one{req};
  const BatchTokenCallback each =
      on_token ? BatchTokenCallback([&](size_t, const Tokens& t, const std::string& text) { on_token(t, text); })
               : BatchTokenCallback();
  return autoregressive_decode_batch(one, BatchOptions{1, 0}, each, [&](const Request&) { return pick; }, constraint,
                                     argmax)[0];
}

}  // namespace specdec::strategies
