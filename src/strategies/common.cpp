#include "strategies/common.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>

#include "core/error.h"
#include "model/device.h"
#include "sampling/grammar.h"

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
  // Speculative decoding's prompt forward yields no token (the last prompt token is fed with
  // the first draft), so its tokens come from its verification rounds; autoregressive
  // decoding's every forward, the prefill included, yields one token: exactly 1.
  const int64_t yielding = n_rounds > 0 ? n_rounds : n_target_forwards;
  return yielding > 0 ? double(n_generated) / double(yielding) : 0.0;
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

void Params::fail_not_resolved(const char* type) {
  fail("strategy parameters: no typed value of ", type, " (the parameters were not resolved: strategies::resolve)");
}

// ---- helpers -----------------------------------------------------------------------------
void check_request(const Request& req) {
  SD_CHECK(req.target != nullptr, "request has no target model");
  SD_CHECK(!req.prompt.empty(), "request has an empty prompt (at least one token, e.g. BOS, is needed)");
  SD_CHECK(req.stop.max_new_tokens >= 0, "max_new_tokens must be >= 0, got ", req.stop.max_new_tokens);
  // Without a trained context length the KV cache is sized from the request alone: bound it.
  const int64_t n_ctx = req.target->config().n_ctx;
  const int64_t limit = n_ctx > 0 ? n_ctx : k_max_positions;
  SD_CHECK(req.stop.max_new_tokens <= limit && static_cast<int64_t>(req.prompt.size()) + req.stop.max_new_tokens <= limit,
           "prompt (", req.prompt.size(), " tokens) + max_new_tokens (", req.stop.max_new_tokens, ") exceeds ",
           n_ctx > 0 ? "the model context of " : "the position limit of ", limit, " tokens");
  const int64_t n_vocab = req.target->config().n_vocab;
  for (size_t i = 0; i < req.prompt.size(); ++i)
    SD_CHECK(req.prompt[i] >= 0 && req.prompt[i] < n_vocab, "prompt token ", i, " = ", req.prompt[i],
             " is outside the target vocabulary (", n_vocab, ")");
}

at::Tensor forward_tokens(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                          int64_t start_pos) {
  return forward_tokens(model, cache, ids, n, start_pos, model::ForwardOptions{});
}

at::Tensor forward_tokens(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                          int64_t start_pos, const model::ForwardOptions& options) {
  return forward_rows(model, cache, ids, n, start_pos, options).logits;
}

model::ForwardResult forward_rows(model::CausalLM& model, model::KVCache& cache, const TokenId* ids, int64_t n,
                                  int64_t start_pos, const model::ForwardOptions& options) {
  return forward_rows(model, cache, at::tensor(std::vector<int64_t>(ids, ids + n), at::kLong), start_pos, options);
}

model::ForwardResult forward_rows(model::CausalLM& model, model::KVCache& cache, const at::Tensor& tokens,
                                  int64_t start_pos, const model::ForwardOptions& options) {
  model::ForwardResult res = model.forward(tokens.view({1, -1}), {start_pos}, cache, options);  // [1, n, ...]
  if (res.logits.defined()) {
    res.logits = res.logits.select(0, 0).to(at::kFloat).contiguous();  // [n, V]
    // The fed ids name a bad logit where they are on the host already.
    std::vector<TokenId> ids;
    if (tokens.is_cpu()) {
      const at::Tensor t = tokens.contiguous();
      ids.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    }
    check_finite_logits(res.logits, model, ids.empty() ? nullptr : ids.data(), start_pos);
  }
  if (res.hidden.defined()) res.hidden = res.hidden.select(0, 0);              // [n, d]
  if (res.layer_hidden.defined()) res.layer_hidden = res.layer_hidden.select(0, 0);  // [n, d]
  return res;
}

namespace {
// Fails naming the first non-finite entry of logits [n, V] (host); none: returns. ids: the fed
// tokens (n of them), or empty.
void name_non_finite(const at::Tensor& logits, const model::ModelConfig& cfg, const std::vector<TokenId>& ids,
                     int64_t start_pos) {
  const int64_t n = logits.size(0), n_vocab = logits.size(1), total = n * n_vocab;
  const float* p = logits.data_ptr<float>();
  for (int64_t i = 0; i < total; ++i) {
    if (std::isfinite(p[i])) continue;
    const int64_t row = i / n_vocab;
    fail(cfg.arch, " model (", cfg.n_layers, " layers, vocabulary ", n_vocab, ") produced non-finite logits: ", p[i],
         " for vocabulary entry ", i % n_vocab, " at position ", start_pos + row,
         " (token id ", row < static_cast<int64_t>(ids.size()) ? ids[row] : -1,
         "); the weights or the model config (e.g. norm epsilon) are corrupt");
  }
}
}  // namespace

// One pass over the rows (a few microseconds per decode step at V = 49,152); only on failure
// do we look for the first bad entry, to name it.
void check_finite_logits(const at::Tensor& logits, const model::CausalLM& model, const TokenId* ids,
                         int64_t start_pos) {
  const auto fed = [&] { return ids ? std::vector<TokenId>(ids, ids + logits.size(0)) : std::vector<TokenId>(); };
  if (!logits.is_cpu()) {
    // On a device one reduction answers, and its flag rides with the loop's next read
    // (model::check_later): no round trip of its own. The rows come to the host only to name
    // the entry.
    const model::ModelConfig cfg = model.config();
    model::check_later(at::isfinite(logits).all().logical_not(),
                       [logits, cfg, ids = fed(), start_pos] { name_non_finite(logits.cpu(), cfg, ids, start_pos); });
    return;
  }
  const float* p = logits.data_ptr<float>();
  const int64_t total = logits.numel();
  // inf and NaN are the floats whose exponent bits are all ones; OR-reducing that test over
  // the bit patterns is an integer reduction, which the compiler vectorises.
  uint32_t bad = 0;
  for (int64_t i = 0; i < total; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (bad) name_non_finite(logits, model.config(), fed(), start_pos);
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
  model::checks_after_read(/*synced=*/false);  // a forward no read followed: its check (model::check_later)
  Result r;
  r.tokens = tracker.tokens();
  r.text = tracker.text();
  r.finish = tracker.finish();
  stats.n_generated = tracker.n_tokens();
  stats.ms_total = clock.ms();
  r.stats = std::move(stats);
  return r;
}

std::shared_ptr<const sampling::Constraint> constraint_for(
    const Request& req, const std::shared_ptr<const sampling::Constraint>& strategy_constraint) {
  return req.constraint ? *req.constraint : strategy_constraint;
}

std::shared_ptr<sampling::ConstraintState> start_constraint(
    const Request& req, const std::shared_ptr<const sampling::Constraint>& strategy_constraint) {
  const auto c = constraint_for(req, strategy_constraint);
  return c ? c->start(req.tokenizer.get(), req.prompt, req.stop.eos_ids) : nullptr;
}

}  // namespace specdec::strategies
