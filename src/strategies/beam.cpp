// beam: Hugging Face beam search (transformers 5.x `_beam_search`), token for token:
//  - each step keeps K = max(2, 1 + n_eos) * num_beams candidates by summed log-probability;
//  - candidates ending in EOS (or reaching max_new_tokens) finish; only the first num_beams
//    of the K may enter the finished set, scored sum_logprobs / n_generated ** length_penalty;
//  - the best num_beams unfinished candidates run on (the KV cache follows via
//    KVCache::reorder, never re-prefilled);
//  - early_stopping true: stop once num_beams hypotheses finished; false: stop when the best
//    running score at the current length cannot beat the worst finished; never: the same
//    bound at max length when length_penalty > 0.
// Scores are float32 and the -1e9 masks are added as HF adds them, so ties resolve alike.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/device.h"
#include "strategies/common.h"
#include "strategies/param_table.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"

namespace specdec::strategies {
namespace {

constexpr float kMask = -1.0e9f;

struct Hypothesis {
  Tokens tokens;        // generated tokens
  float score = kMask;  // finished: length-penalised; running: summed log-probability
  bool finished = false;
};

struct Candidate {
  int64_t beam = 0;
  TokenId token = 0;
  float logprob = 0;  // summed log-probability including this token
  bool hits_stop = false;
};

struct BeamConfig {
  int64_t num_beams = 4, num_return = 1;
  double length_penalty = 1.0;
  std::string early_stopping = "false";
  sampling::ProcessorConfig proc;  // not a parameter of its own: processor_config
};

ParamTable<BeamConfig> beam_params() {
  using B = BeamConfig;
  return ParamTable<B>()
      .field("num_beams", &B::num_beams, "4", "number of beams")
      .field("length_penalty", &B::length_penalty, "1.0", "finished score = sum logprob / n_generated ** length_penalty")
      .field("early_stopping", &B::early_stopping, "false", "true | false | never (as Hugging Face)")
      .field("num_return_sequences", &B::num_return, "1", "sequences returned (<= num_beams), best first")
      .finish([](B& b) {
        SD_CHECK(b.num_beams >= 1, "beam: num_beams must be >= 1, got ", b.num_beams);
        SD_CHECK(b.num_return >= 1 && b.num_return <= b.num_beams,
                 "beam: num_return_sequences must be in [1, num_beams], got ", b.num_return);
        SD_CHECK(b.early_stopping == "true" || b.early_stopping == "false" || b.early_stopping == "never",
                 "beam: early_stopping must be true, false or never, got '", b.early_stopping, "'");
      });
}

// Indices of the `k` largest values, largest first; equal values keep their index order.
std::vector<int64_t> top_indices(const std::vector<float>& values, int64_t k) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  idx.resize(std::min<int64_t>(k, static_cast<int64_t>(idx.size())));
  return idx;
}

class Beam : public Strategy {
 public:
  explicit Beam(const Params& p) : cfg_(p.typed<BeamConfig>()) { cfg_.proc = processor_config(p); }

  Result generate(const Request& req, const TokenCallback& on_token) override;

 private:
  std::vector<Candidate> top_candidates(const at::Tensor& logits /* [B, V] */, const std::vector<Hypothesis>& running,
                                        const Request& req, int64_t n_keep, int64_t step) const;
  void update_finished(std::vector<Hypothesis>& finished, const std::vector<Candidate>& cands,
                       const std::vector<Hypothesis>& running, int64_t step, bool improvable) const;
  bool improvable(const std::vector<Hypothesis>& finished, float best_running, int64_t n_generated,
                  int64_t max_new) const;

  BeamConfig cfg_;
};

// log_softmax, processors on log-probabilities (as HF), add each beam's running score and
// keep the K best of all B * V continuations.
std::vector<Candidate> Beam::top_candidates(const at::Tensor& logits, const std::vector<Hypothesis>& running,
                                            const Request& req, int64_t n_keep, int64_t step) const {
  const int64_t n_beams = logits.size(0), n_vocab = logits.size(1);
  at::Tensor lp = logits.log_softmax(1);  // [B, V]
  if (cfg_.proc.repetition_penalty != 1.0) {
    sampling::ProcessorConfig rep;
    rep.temperature = 0;  // processors only, no warpers (HF beam search without sampling)
    rep.repetition_penalty = cfg_.proc.repetition_penalty;
    for (int64_t b = 0; b < n_beams; ++b) {
      Tokens ctx = req.prompt;
      ctx.insert(ctx.end(), running[b].tokens.begin(), running[b].tokens.end());
      lp[b].copy_(sampling::process_logits(lp[b].unsqueeze(0), rep, ctx).squeeze(0));
    }
  }
  std::vector<float> scores(running.size());
  for (size_t b = 0; b < running.size(); ++b) scores[b] = running[b].score;
  const at::Tensor running_scores = at::tensor(scores, at::kFloat).view({n_beams, 1});
  const at::Tensor acc = (lp + model::to_device_async(running_scores, lp.device())).reshape({-1});  // [B*V]
  auto [vals, idx] = acc.topk(n_keep);
  // One host read for the step: the candidates' ids, their scores riding with them.
  const at::Tensor vals_host = model::to_host_async(vals.contiguous());
  const at::Tensor idx_host = model::on_host(idx).contiguous();
  const float* v = vals_host.data_ptr<float>();
  const int64_t* x = idx_host.data_ptr<int64_t>();
  std::vector<Candidate> out(n_keep);
  for (int64_t c = 0; c < n_keep; ++c) {
    out[c].beam = x[c] / n_vocab;
    out[c].token = static_cast<TokenId>(x[c] % n_vocab);
    out[c].logprob = v[c];
    const bool eos = std::count(req.stop.eos_ids.begin(), req.stop.eos_ids.end(), out[c].token) > 0;
    out[c].hits_stop = eos || step + 1 >= req.stop.max_new_tokens;
  }
  return out;
}

// HF _update_finished_beams: merge the finished set with the candidates that just finished
// among the first num_beams, keep the best num_beams.
void Beam::update_finished(std::vector<Hypothesis>& finished, const std::vector<Candidate>& cands,
                           const std::vector<Hypothesis>& running, int64_t step, bool improvable) const {
  const int64_t n_beams = cfg_.num_beams;
  const bool all_finished = std::all_of(finished.begin(), finished.end(), [](auto& h) { return h.finished; });
  const bool full = all_finished && cfg_.early_stopping == "true";
  const float denom = static_cast<float>(std::pow(double(step + 1), cfg_.length_penalty));
  std::vector<Hypothesis> merged = finished;
  for (size_t c = 0; c < cands.size(); ++c) {
    const bool just_finished = cands[c].hits_stop && static_cast<int64_t>(c) < n_beams;
    Hypothesis h;
    h.score = cands[c].logprob / denom;
    if (full) h.score += kMask;
    if (!improvable) h.score += kMask;
    if (!just_finished) h.score += kMask;
    h.finished = just_finished;
    h.tokens = running[cands[c].beam].tokens;
    h.tokens.push_back(cands[c].token);
    merged.push_back(std::move(h));
  }
  std::vector<float> scores(merged.size());
  for (size_t i = 0; i < merged.size(); ++i) scores[i] = merged[i].score;
  std::vector<Hypothesis> next;
  for (int64_t i : top_indices(scores, n_beams)) next.push_back(std::move(merged[i]));
  finished = std::move(next);
}

// HF _check_early_stop_heuristic for one batch entry.
bool Beam::improvable(const std::vector<Hypothesis>& finished, float best_running, int64_t n_generated,
                      int64_t max_new) const {
  const int64_t len = (cfg_.early_stopping == "never" && cfg_.length_penalty > 0) ? max_new : n_generated;
  const float best_possible = best_running / static_cast<float>(std::pow(double(len), cfg_.length_penalty));
  float worst = finished[0].score;
  for (auto& h : finished) worst = std::min(worst, h.score);
  for (auto& h : finished)
    if (best_possible > (h.finished ? worst : kMask)) return true;
  return false;
}

Result Beam::generate(const Request& req, const TokenCallback& on_token) {
  Stopwatch clock;
  check_request(req);
  SD_CHECK(req.stop.stop_strings.empty(), "beam: stop strings are not supported by beam search");
  SD_CHECK(!req.trace, "beam: --trace is not supported by beam search (it keeps several sequences; trace "
           "greedy, sampling or speculative instead)");
  SD_CHECK(!req.constraint || !*req.constraint, "beam: structured output is not supported by beam search (use ",
           "greedy, sampling or speculative)");
  Stats st;
  st.n_prompt = static_cast<int64_t>(req.prompt.size());
  const int64_t n_beams = cfg_.num_beams, max_new = req.stop.max_new_tokens;
  const int64_t n_keep = std::max<int64_t>(2, 1 + static_cast<int64_t>(req.stop.eos_ids.size())) * n_beams;
  StopTracker tracker(req.stop, req.tokenizer.get(), nullptr);
  if (tracker.done()) return make_result(tracker, st, clock);

  // Prefill once (batch 1), then broadcast the prompt's K/V into every beam's row.
  const int64_t capacity = cache_capacity(req, 0);
  model::KVCache cache = req.target->make_cache(n_beams, capacity);
  at::Tensor logits;  // [B, V]
  {
    ScopedTimer t(st.phase_ms.prefill);
    model::KVCache one = req.target->make_cache(1, capacity);
    logits = forward_tokens(*req.target, one, req.prompt.data(), st.n_prompt, 0);
    logits = logits.select(0, st.n_prompt - 1).unsqueeze(0).expand({n_beams, logits.size(1)}).contiguous();
    for (int64_t l = 0; l < one.n_layers(); ++l) {
      cache.k(l).copy_(one.k(l).expand_as(cache.k(l)));
      cache.v(l).copy_(one.v(l).expand_as(cache.v(l)));
    }
    for (int64_t b = 0; b < n_beams; ++b) cache.set_length(b, st.n_prompt);
  }
  ++st.n_target_forwards;
  std::vector<Hypothesis> running(n_beams), finished(n_beams);
  for (int64_t b = 0; b < n_beams; ++b) running[b].score = b == 0 ? 0.0f : kMask;
  bool improvable_flag = true;
  for (int64_t step = 0;; ++step) {
    std::vector<Candidate> cands;
    std::vector<Hypothesis> next(n_beams);
    std::vector<int64_t> parents(n_beams);
    {
      ScopedTimer t(st.phase_ms.sample);
      cands = top_candidates(logits, running, req, n_keep, step);
      std::vector<float> masked(cands.size());
      for (size_t c = 0; c < cands.size(); ++c) masked[c] = cands[c].logprob + (cands[c].hits_stop ? kMask : 0.0f);
      const std::vector<int64_t> keep = top_indices(masked, n_beams);
      for (int64_t b = 0; b < n_beams; ++b) {
        const Candidate& c = cands[keep[b]];
        next[b].tokens = running[c.beam].tokens;
        next[b].tokens.push_back(c.token);
        next[b].score = masked[keep[b]];
        parents[b] = c.beam;
      }
      update_finished(finished, cands, running, step, improvable_flag);
      improvable_flag = improvable_flag && improvable(finished, next[0].score, step + 1, max_new);
    }
    running = std::move(next);
    const bool all_finished = std::all_of(finished.begin(), finished.end(), [](auto& h) { return h.finished; });
    const bool all_hit = std::all_of(cands.begin(), cands.end(), [](auto& c) { return c.hits_stop; });
    if (!improvable_flag || (all_finished && cfg_.early_stopping == "true") || all_hit) break;
    if (tracker.timed_out()) {  // keep the best running beams as they are
      for (auto& h : running) h.finished = true;
      finished = running;
      break;
    }
    ScopedTimer t(st.phase_ms.verify);
    cache.reorder(parents);
    at::Tensor tokens = at::empty({n_beams, 1}, at::kLong);
    int64_t* tok = tokens.data_ptr<int64_t>();
    for (int64_t b = 0; b < n_beams; ++b) tok[b] = running[b].tokens.back();
    logits = req.target->forward(tokens, std::vector<int64_t>(n_beams, st.n_prompt + step), cache)
                 .select(1, 0).to(at::kFloat).contiguous();  // [B, V]
    for (int64_t b = 0; b < n_beams; ++b) {  // every beam is one token at the same position
      const TokenId id = running[b].tokens.back();
      check_finite_logits(logits.narrow(0, b, 1), *req.target, &id, st.n_prompt + step);
    }
    ++st.n_target_forwards;
  }

  Result r;
  for (int64_t i = 0; i < cfg_.num_return; ++i) {
    Result::Sequence s;
    s.tokens = finished[i].tokens;
    s.score = finished[i].score;
    if (req.tokenizer) s.text = req.tokenizer->decode(s.tokens, /*skip_special=*/true);
    r.sequences.push_back(std::move(s));
  }
  r.tokens = r.sequences[0].tokens;
  r.text = r.sequences[0].text;
  const bool ends_eos = !r.tokens.empty() &&
                        std::count(req.stop.eos_ids.begin(), req.stop.eos_ids.end(), r.tokens.back()) > 0;
  r.finish = tracker.done() && tracker.finish() == FinishReason::timeout ? FinishReason::timeout
             : ends_eos                                                  ? FinishReason::eos
                                                                         : FinishReason::length;
  if (on_token) on_token(r.tokens, r.text);  // beam tokens are final only at the end
  st.n_generated = static_cast<int64_t>(r.tokens.size());
  st.ms_first_token = st.ms_total = clock.ms();
  r.stats = st;
  return r;
}

}  // namespace

StrategyInfo beam_info() {
  StrategyInfo info;
  info.name = "beam";
  info.description = "beam search with Hugging Face semantics (length penalty, early stopping)";
  declare_params(info, beam_params());
  info.factory = [](const Params& p) { return std::make_unique<Beam>(p); };
  return info;
}

}  // namespace specdec::strategies
