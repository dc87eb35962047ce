#include "strategies/common.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace specdec::strategies {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::eos: return "eos";
    case FinishReason::length: return "length";
    case FinishReason::stop_string: return "stop_string";
    case FinishReason::timeout: return "timeout";
  }
  return "unknown";
}

double Stats::tau() const {
  const int64_t n_decode_forwards = n_target_forwards - (n_prompt > 0 ? 1 : 0);
  return n_decode_forwards > 0 ? double(n_generated) / double(n_decode_forwards) : 0.0;
}

// ---- Params: typed getters -------------------------------------------------------------
std::string Params::get_string(const std::string& key) const {
  auto it = values_.find(key);
  SD_CHECK(it != values_.end(), "strategy parameter '", key, "' is not set");
  return it->second;
}

int64_t Params::get_int(const std::string& key) const {
  const std::string v = get_string(key);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  SD_CHECK(!v.empty() && end && *end == '\0' && errno == 0, "strategy parameter '", key,
           "': expected an integer, got '", v, "'");
  return x;
}

double Params::get_float(const std::string& key) const {
  const std::string v = get_string(key);
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  SD_CHECK(!v.empty() && end && *end == '\0' && errno == 0, "strategy parameter '", key,
           "': expected a number, got '", v, "'");
  return x;
}

bool Params::get_bool(const std::string& key) const {
  const std::string v = get_string(key);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  fail("strategy parameter '", key, "': expected true/false, got '", v, "'");
}

// ---- helpers -----------------------------------------------------------------------------
void check_request(const Request& req) {
  SD_CHECK(req.target != nullptr, "request has no target model");
  SD_CHECK(!req.prompt.empty(), "request has an empty prompt (at least one token, e.g. BOS, is needed)");
  const int64_t n_vocab = req.target->config().n_vocab;
  for (size_t i = 0; i < req.prompt.size(); ++i)
    SD_CHECK(req.prompt[i] >= 0 && req.prompt[i] < n_vocab, "prompt token ", i, " = ", req.prompt[i],
             " is outside the target vocabulary (", n_vocab, ")");
}

at::Tensor forward_tokens(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                          int64_t start_pos) {
  at::Tensor tokens = at::empty({1, n}, at::kLong);
  int64_t* t = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) t[i] = ids[i];
  at::Tensor logits = model.forward(tokens, {start_pos}, cache);  // [1, n, V]
  return logits.select(0, 0).to(at::kFloat).contiguous();
}

int64_t cache_capacity(const Request& req, int64_t slack) {
  const int64_t need = static_cast<int64_t>(req.prompt.size()) + req.stop.max_new_tokens + slack + 1;
  const int64_t n_ctx = req.target->config().n_ctx;
  SD_CHECK(n_ctx <= 0 || static_cast<int64_t>(req.prompt.size()) + req.stop.max_new_tokens <= n_ctx,
           "prompt (", req.prompt.size(), " tokens) + max_new_tokens (", req.stop.max_new_tokens,
           ") exceeds the model context of ", n_ctx, " tokens");
  return need;
}

Result make_result(const StopTracker& tracker, Stats stats, const Stopwatch& clock) {
  Result r;
  r.tokens = tracker.tokens();
  r.text = tracker.text();
  r.finish = tracker.finish();
  stats.n_generated = tracker.n_tokens();
  stats.ms_total = clock.ms();
  r.stats = std::move(stats);
  return r;
}

}  // namespace specdec::strategies

namespace specdec::strategies {

Result autoregressive_decode(const Request& req, const TokenCallback& on_token, const PickToken& pick) {
  Stopwatch clock;
  check_request(req);
  Stats st;
  st.n_prompt = static_cast<int64_t>(req.prompt.size());
  StopTracker tracker(req.stop, req.tokenizer.get(), &on_token);
  if (tracker.done()) return make_result(tracker, st, clock);

  model::KVCache cache = req.target->make_cache(1, cache_capacity(req, 0));
  Tokens context = req.prompt;
  at::Tensor logits;  // [T, V]
  {
    ScopedTimer t(st.ms_prefill);
    logits = forward_tokens(*req.target, cache, context.data(), st.n_prompt, 0);
  }
  ++st.n_target_forwards;
  at::Tensor row = logits.select(0, logits.size(0) - 1);  // [V]
  while (true) {
    TokenId token;
    {
      ScopedTimer t(st.ms_sample);
      token = pick(row, context);
    }
    context.push_back(token);
    if (st.ms_first_token == 0) st.ms_first_token = clock.ms();
    const bool stop = tracker.push(token);
    tracker.flush();
    if (stop || tracker.timed_out()) break;
    ScopedTimer t(st.ms_verify);  // target decode forwards count as "verify" time
    row = forward_tokens(*req.target, cache, &token, 1, static_cast<int64_t>(context.size()) - 1).select(0, 0);
    ++st.n_target_forwards;
  }
  tracker.flush();
  return make_result(tracker, st, clock);
}

}  // namespace specdec::strategies
