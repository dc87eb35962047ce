// Logits processors with Hugging Face semantics (transformers generation/logits_process.py):
//   RepetitionPenalty (a "processor", also applied in greedy/beam search), then the sampling
//   "warpers" Temperature -> TopK -> TopP -> MinP, each setting filtered scores to -inf.
#include "sampling/processors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/host_reads.h"
#include "kernels/backend.h"
#include "kernels/verify_math.h"
#include "model/checks.h"
#include "model/device.h"

namespace specdec::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_config(const ProcessorConfig& cfg) {
  SD_CHECK(cfg.top_k >= 0, "top_k must be >= 0 (0 = off), got ", cfg.top_k);
  SD_CHECK(cfg.top_p > 0.0 && cfg.top_p <= 1.0, "top_p must be in (0, 1], got ", cfg.top_p);
  SD_CHECK(cfg.min_p >= 0.0 && cfg.min_p <= 1.0, "min_p must be in [0, 1], got ", cfg.min_p);
  SD_CHECK(cfg.repetition_penalty > 0.0, "repetition_penalty must be > 0, got ", cfg.repetition_penalty);
  SD_CHECK(std::isfinite(cfg.temperature) && cfg.temperature >= 0.0, "temperature must be >= 0, got ",
           cfg.temperature);
}

// THE repetition penalty (HF RepetitionPenaltyLogitsProcessor): every token id seen so far
// (each once) has its score divided by the penalty when positive and multiplied when
// negative. Both the processor chain and greedy_token go through here.
void penalise(float* row, const std::vector<TokenId>& seen_ids, float penalty) {
  for (TokenId id : seen_ids) {
    float& s = row[id];
    s = s < 0 ? s * penalty : s / penalty;
  }
}

// The distinct token ids seen so far, in first-seen order.
struct SeenIds {
  explicit SeenIds(int64_t n_vocab) : mark(n_vocab, 0) {}
  void add(TokenId id) {
    const auto n_vocab = static_cast<int64_t>(mark.size());
    SD_CHECK(id >= 0 && id < n_vocab, "repetition penalty: token id ", id, " outside vocab ", n_vocab);
    if (!mark[id]) { mark[id] = 1; ids.push_back(id); }
  }
  std::vector<uint8_t> mark;
  std::vector<TokenId> ids;
};

// The draft tokens on the path from the root to node `node` (inclusive), leaf first, each id
// once and none that the context already holds. parents empty: a chain.
std::vector<TokenId> new_path_ids(const SeenIds& context, const Tokens& draft, const std::vector<int32_t>& parents,
                                  int64_t node) {
  std::vector<TokenId> ids;
  for (int64_t a = node; a >= 0; a = parents.empty() ? a - 1 : parents[a]) {
    const TokenId id = draft[a];
    SD_CHECK(id >= 0 && id < static_cast<int64_t>(context.mark.size()), "repetition penalty: draft token ", id,
             " outside vocab ", context.mark.size());
    if (!context.mark[id] && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

// The host's draft (tokens, parents) checked against the N rows that follow it.
void check_draft(int64_t n_rows, const Tokens& draft, const std::vector<int32_t>& parents) {
  SD_CHECK(static_cast<int64_t>(draft.size()) + 1 >= n_rows, "repetition penalty: ", n_rows,
           " rows need at least ", n_rows - 1, " draft tokens, got ", draft.size());
  SD_CHECK(parents.empty() || parents.size() == draft.size(), "repetition penalty: ", parents.size(),
           " parents for ", draft.size(), " draft tokens");
  for (size_t j = 0; j < parents.size(); ++j)
    SD_CHECK(parents[j] >= -1 && parents[j] < static_cast<int32_t>(j), "repetition penalty: parents[", j,
             "] = ", parents[j], " is outside [-1, ", j, ")");
}

// On a device (and wherever the draft is given as tensors), in place, with no read: the entries
// to scale are listed there, a fixed number whatever the draft's tokens: every row's distinct
// context ids (found on the host, where the context is), and a (row, token) pair for each row
// and draft node, the nodes on the row's path (draft.rows; the tree's ancestor sets,
// model::ancestor_sets; a chain's are its prefixes) penalised. Each listed entry is written from
// its original score: penalised by one multiply or divide in float32 by a device scalar (a host
// scalar lets a GPU divide by the reciprocal), so an entry listed twice (a path token also in
// the context, or twice on the path) gets the same value twice, and the result equals the
// host's id lists bit for bit. A pair off the path goes to its row's anchor instead, an entry
// written the same way anyway: the row's own node's token, else its first context id; a row
// with neither (the root's row after an empty context) has nothing penalised, and its anchor,
// id 0, is written unchanged.
void penalise_on_device(at::Tensor& scores /* [N, V] */, const ProcessorConfig& cfg, const Tokens& context,
                        const DeviceDraft& draft) {
  if (cfg.repetition_penalty == 1.0) return;
  const int64_t N = scores.size(0), V = scores.size(1);
  const auto longs = at::TensorOptions().dtype(at::kLong).device(scores.device());
  std::vector<int64_t> ids(context.begin(), context.end());
  for (int64_t id : ids) SD_CHECK(id >= 0 && id < V, "repetition penalty: token id ", id, " outside vocab ", V);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const at::Tensor row_base = (at::arange(N, longs) * V).unsqueeze(1);  // [N, 1]
  std::vector<at::Tensor> entries, penalised;                          // row * V + id; whether scaled
  if (!ids.empty()) {
    entries.push_back((row_base + model::to_device_async(at::tensor(ids), scores.device())).view({-1}));
    penalised.push_back(at::ones({entries.back().numel()}, longs.dtype(at::kBool)));
  }
  const int64_t D = draft.tokens.defined() ? draft.tokens.numel() : 0;
  if (D > 0) {
    SD_CHECK(!draft.parents.defined() || draft.parents.numel() == D, "repetition penalty: ", draft.parents.numel(),
             " parents for ", D, " draft tokens");
    if (draft.rows.defined())
      SD_CHECK(draft.rows.numel() == N, "repetition penalty: ", draft.rows.numel(), " row nodes for ", N, " rows");
    else
      SD_CHECK(D + 1 >= N, "repetition penalty: ", N, " rows need at least ", N - 1, " draft tokens, got ", D);
    // Out-of-range ids (a drawn row without mass gives -1) are clamped: the target's forward or
    // the verdict's read names them.
    const at::Tensor tok = draft.tokens.to(longs).view({D}).clamp(0, V - 1);
    const at::Tensor anc = draft.parents.defined() ? model::ancestor_sets(draft.parents.to(longs).view({1, D}))[0]
                                                   : at::ones({D, D}, longs.dtype(at::kBool)).tril();  // [D, D]
    const at::Tensor rows = draft.rows.defined() ? draft.rows.to(longs).view({N}).clamp(-1, D - 1)
                                                 : at::arange(-1, N - 1, longs);
    const at::Tensor path = at::cat({at::zeros({1, D}, anc.options()), anc}).index_select(0, rows + 1);  // [N, D]
    const at::Tensor follows_node = (rows >= 0).unsqueeze(1);                                            // [N, 1]
    const at::Tensor anchor = row_base + at::where(follows_node, tok.index_select(0, rows.clamp_min(0)).unsqueeze(1),
                                                   ids.empty() ? 0 : ids[0]);
    entries.push_back(at::where(path, row_base + tok.unsqueeze(0), anchor).view({-1}));
    penalised.push_back((path | follows_node | !ids.empty()).view({-1}));
  }
  if (entries.empty()) return;
  const at::Tensor at_idx = at::cat(entries);
  at::Tensor flat = scores.view({-1});
  const at::Tensor v = flat.index_select(0, at_idx);
  const at::Tensor penalty = at::full({}, static_cast<float>(cfg.repetition_penalty), scores.options());
  flat.index_copy_(0, at_idx, at::where(at::cat(penalised), at::where(v < 0, v * penalty, v / penalty), v));
}

// Row 0 sees the context; row i > 0 the context + the path to draft node i - 1. On the host
// for host scores; a device's go up (penalise_on_device).
void apply_repetition_penalty(at::Tensor& logits /* [N, V] */, const ProcessorConfig& cfg, const Tokens& context,
                              const Tokens& draft, const std::vector<int32_t>& parents) {
  if (cfg.repetition_penalty == 1.0) return;
  const int64_t n_rows = logits.size(0), n_vocab = logits.size(1);
  check_draft(n_rows, draft, parents);
  if (!logits.device().is_cpu()) {
    DeviceDraft up;
    if (!draft.empty()) {
      up.tokens = model::to_device_async(at::tensor(std::vector<int64_t>(draft.begin(), draft.end())), logits.device());
      if (!parents.empty())
        up.parents = model::to_device_async(at::tensor(std::vector<int64_t>(parents.begin(), parents.end())),
                                            logits.device());
    }
    penalise_on_device(logits, cfg, context, up);
    return;
  }
  SeenIds seen(n_vocab);
  for (TokenId id : context) seen.add(id);
  const float penalty = static_cast<float>(cfg.repetition_penalty);
  float* data = logits.data_ptr<float>();
  for (int64_t i = 0; i < n_rows; ++i) {
    penalise(data + i * n_vocab, seen.ids, penalty);
    if (i > 0) penalise(data + i * n_vocab, new_path_ids(seen, draft, parents, i - 1), penalty);
  }
}

// HF TopKLogitsWarper: remove scores strictly below the k-th largest (ties survive).
void apply_top_k(at::Tensor& scores /* [N, V] */, int64_t top_k) {
  const int64_t k = std::min(top_k, scores.size(1));
  at::Tensor kth = std::get<0>(scores.topk(k, /*dim=*/1)).select(1, k - 1).unsqueeze(1);
  scores.masked_fill_(scores < kth, kNegInf);
}

// HF TopPLogitsWarper: sort ascending, drop the prefix whose cumulative probability is
// <= 1 - top_p, always keep the most likely token. Equivalently, from the top: a token stays
// while the mass at and below it, total - (the mass ranked above it), is > (1 - top_p) total.
//
// On the host that is how it runs, without sorting the vocabulary. Only a token heavier than
// (1 - top_p) total / V can stay (the mass at and below a lighter one is at most V times its
// own), and the candidates are ranked (the higher score first, the lower id among equal scores,
// as argmax and the exact-law reference rank them) only as far as the nucleus reaches: 64 at a
// time, then 8x more, each step an nth_element over the rest. Sorting SmolLM2's 49152 scores
// took 3.5 ms a row, more than its decode step (docs/design.md, "Host work"). The masses are sums
// in double of exp(score - max) in float: a float softmax's own sum over 49152 tokens is off by
// ~1.5e-5, as much as a token's probability in a flat row. A device sorts (no host read, so
// graphs can capture it).
void top_p_on_host(at::Tensor& scores /* [N, V] float32, contiguous */, double top_p) {
  const at::Tensor e = (scores - std::get<0>(scores.max(1, /*keepdim=*/true))).exp();
  const at::Tensor totals = e.sum(1, /*keepdim=*/false, at::kDouble);
  const int64_t V = scores.size(1);
  // A candidate's rank as one integer, smaller first: the score's bits made to order as the
  // score does, inverted (the higher score first), then the id.
  const auto rank_key = [](float score, int32_t id) {
    if (score == 0.0f) score = 0.0f;  // -0 ranks as +0
    uint32_t bits;
    std::memcpy(&bits, &score, sizeof bits);
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return (uint64_t(~bits) << 32) | uint32_t(id);
  };
  std::vector<uint64_t> order;
  for (int64_t r = 0; r < scores.size(0); ++r) {
    float* row = scores.data_ptr<float>() + r * V;
    const float* w = e.data_ptr<float>() + r * V;
    const double total = totals.data_ptr<double>()[r];
    const double floor = (1.0 - top_p) * total;
    const auto light = static_cast<float>(floor / double(V) * (1 - 1e-6));  // rounded down: no candidate missed
    order.clear();
    for (int32_t u = 0; u < V; ++u)
      if (w[u] > light) order.push_back(rank_key(row[u], u));
    const auto n = static_cast<int64_t>(order.size());
    if (n == 0) continue;  // no finite score: nothing to rank
    int64_t kept = 0;  // ranks [0, kept) stay
    double above = 0;
    for (int64_t k = std::min<int64_t>(n, 64);; k = std::min(n, 8 * k)) {
      std::nth_element(order.begin() + kept, order.begin() + k - 1, order.end());
      std::sort(order.begin() + kept, order.begin() + k);
      for (; kept < k && total - above > floor; ++kept) above += w[order[kept] & 0xffffffffu];  // the top one always
      if (kept < k || k == n) break;
    }
    const auto last = static_cast<int32_t>(order[kept - 1] & 0xffffffffu);  // the last token kept:
    const float last_score = row[last];                                      // every one ranked after it goes
    for (int32_t u = 0; u < V; ++u)
      if (row[u] < last_score || (row[u] == last_score && u > last)) row[u] = kNegInf;
  }
}

void apply_top_p(at::Tensor& scores /* [N, V] */, double top_p) {
  if (scores.device().is_cpu()) return top_p_on_host(scores, top_p);
  auto [sorted, order] = scores.sort(/*dim=*/1, /*descending=*/false);
  at::Tensor cum = sorted.softmax(1).cumsum(1);
  at::Tensor remove_sorted = cum <= (1.0 - top_p);
  remove_sorted.select(1, scores.size(1) - 1).fill_(false);
  at::Tensor remove = at::empty_like(remove_sorted).scatter_(1, order, remove_sorted);
  scores.masked_fill_(remove, kNegInf);
}

// HF MinPLogitsWarper: drop tokens with probability < min_p * max probability.
void apply_min_p(at::Tensor& scores /* [N, V] */, double min_p) {
  at::Tensor probs = scores.softmax(1);
  at::Tensor top = std::get<0>(probs.max(1, /*keepdim=*/true));
  at::Tensor remove = probs < top * min_p;
  // keep at least the arg-max (min_tokens_to_keep = 1)
  remove.scatter_(1, argmax_rows(probs).unsqueeze(1), false);
  scores.masked_fill_(remove, kNegInf);
}

}  // namespace

namespace {
// logits as the processors' [N, V] float32 scores (a new tensor), the configuration checked.
at::Tensor scores_of(const at::Tensor& logits, const ProcessorConfig& cfg) {
  check_config(cfg);
  SD_CHECK(logits.dim() == 2, "process_logits: logits must be [N, V], got ", logits.dim(), " dims");
  return logits.to(at::kFloat).contiguous().clone();
}

// The warpers after the penalty (none when greedy).
at::Tensor warp(at::Tensor scores, const ProcessorConfig& cfg) {
  if (cfg.greedy()) return scores;
  if (cfg.temperature != 1.0) scores.div_(cfg.temperature);
  if (cfg.top_k > 0) apply_top_k(scores, cfg.top_k);
  if (cfg.top_p < 1.0) apply_top_p(scores, cfg.top_p);
  if (cfg.min_p > 0.0) apply_min_p(scores, cfg.min_p);
  return scores;
}

at::Tensor to_probabilities(const at::Tensor& scores, const ProcessorConfig& cfg) {
  if (!cfg.greedy()) return scores.softmax(1);
  // Greedy = the limit temperature -> 0: all mass on the arg-max (first index on ties).
  at::Tensor one_hot = at::zeros_like(scores);
  one_hot.scatter_(1, argmax_rows(scores).unsqueeze(1), 1.0f);
  return one_hot;
}
}  // namespace

at::Tensor process_logits(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                          const Tokens& draft, const std::vector<int32_t>& parents) {
  at::Tensor scores = scores_of(logits, cfg);
  apply_repetition_penalty(scores, cfg, context, draft, parents);
  return warp(std::move(scores), cfg);
}

at::Tensor process_logits(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                          const DeviceDraft& draft) {
  at::Tensor scores = scores_of(logits, cfg);
  penalise_on_device(scores, cfg, context, draft);
  return warp(std::move(scores), cfg);
}

at::Tensor probabilities(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                         const Tokens& draft, const std::vector<int32_t>& parents) {
  return to_probabilities(process_logits(logits, cfg, context, draft, parents), cfg);
}

at::Tensor probabilities(const at::Tensor& logits, const ProcessorConfig& cfg, const Tokens& context,
                         const DeviceDraft& draft) {
  return to_probabilities(process_logits(logits, cfg, context, draft), cfg);
}

at::Tensor argmax_rows(const at::Tensor& rows) {
  SD_CHECK(rows.dim() == 2, "argmax_rows: expected [N, V], got ", rows.dim(), " dims");
  SD_CHECK(rows.size(1) > 0, "argmax_rows: empty rows");
  // On a device, on the device (at::argmax also gives the first of tied maxima); rows there
  // are finite (check_finite_logits) or -inf where a processor removed a token.
  if (!rows.is_cpu()) return at::argmax(rows.to(at::kFloat), 1);
  const at::Tensor x = rows.to(at::kFloat).contiguous();  // the scan runs on the host
  const int64_t n_rows = x.size(0), n_vocab = x.size(1);
  SD_CHECK(n_vocab > 0, "argmax_rows: empty rows");
  at::Tensor out = at::empty({n_rows}, at::kLong);
  const float* data = x.data_ptr<float>();
  int64_t* ids = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < n_rows; ++i) ids[i] = kernels::math::argmax_row(data + i * n_vocab, n_vocab);
  return out.to(rows.device());
}

TokenId host_greedy_token(const at::Tensor& logits_row, const ProcessorConfig& cfg, const Tokens& context) {
  SD_CHECK(logits_row.dim() == 1 && logits_row.scalar_type() == at::kFloat && logits_row.is_contiguous(),
           "greedy_token: expected a contiguous float [V] row");
  const int64_t n_vocab = logits_row.size(0);
  SD_CHECK(n_vocab > 0, "greedy_token: empty row");
  const float* row = logits_row.data_ptr<float>();
  if (cfg.repetition_penalty == 1.0) return static_cast<TokenId>(kernels::math::argmax_row(row, n_vocab));
  // Penalise a copy (one [V] row), then the shared argmax.
  SeenIds seen(n_vocab);
  for (TokenId id : context) seen.add(id);
  std::vector<float> scores(row, row + n_vocab);
  penalise(scores.data(), seen.ids, static_cast<float>(cfg.repetition_penalty));
  return static_cast<TokenId>(kernels::math::argmax_row(scores.data(), n_vocab));
}

std::vector<TokenId> greedy_tokens(const std::vector<at::Tensor>& rows, const ProcessorConfig& cfg,
                                   const std::vector<const Tokens*>& contexts) {
  SD_CHECK(rows.size() == contexts.size(), "greedy_tokens: ", rows.size(), " rows, ", contexts.size(), " contexts");
  std::vector<TokenId> out;
  if (rows.empty()) return out;
  if (rows[0].is_cpu()) {
    count_host_read();  // what a device pays for the tokens (core/host_reads.h): one read for all
    for (size_t i = 0; i < rows.size(); ++i) out.push_back(host_greedy_token(rows[i], cfg, *contexts[i]));
    return out;
  }
  std::vector<at::Tensor> picks;  // on the device; one read brings them all
  for (size_t i = 0; i < rows.size(); ++i) {
    at::Tensor row = rows[i].to(at::kFloat).contiguous().clone().view({1, -1});
    apply_repetition_penalty(row, cfg, *contexts[i], {}, {});
    picks.push_back(argmax_rows(row));
  }
  const at::Tensor ids = model::on_host(at::cat(picks)).contiguous();
  for (int64_t i = 0; i < ids.size(0); ++i) out.push_back(static_cast<TokenId>(ids[i].item<int64_t>()));
  return out;
}

TokenId greedy_token(const at::Tensor& logits_row, const ProcessorConfig& cfg, const Tokens& context) {
  return greedy_tokens({logits_row}, cfg, {&context})[0];
}

TokenId sample_from(const float* probs, int64_t n_vocab, double u) {
  const int64_t id = kernels::math::inverse_cdf_row(probs, n_vocab, u);
  SD_CHECK(id >= 0, "sample_from: probability row has no positive entry");
  return static_cast<TokenId>(id);
}

TokenId sample_from(const at::Tensor& probs, double u) {
  SD_CHECK(probs.dim() >= 1 && probs.numel() == probs.size(-1), "sample_from: expected one probability row, got ",
           probs.sizes());
  const at::Tensor row = model::on_host(probs).to(at::kFloat).contiguous();
  return sample_from(row.data_ptr<float>(), row.numel(), u);
}

at::Tensor pick_tokens(const at::Tensor& scores_in, const std::vector<double>& uniforms) {
  SD_CHECK(scores_in.dim() == 2, "pick_tokens: expected scores [R, V], got ", scores_in.sizes());
  const at::Tensor scores = scores_in.to(at::kFloat).contiguous();  // [R, V]
  const int64_t R = scores.size(0);
  SD_CHECK(uniforms.empty() || static_cast<int64_t>(uniforms.size()) == R, "pick_tokens: ", uniforms.size(),
           " uniforms for ", R, " rows");
  at::Tensor out = at::empty({R}, scores.options().dtype(at::kLong));  // [R]
  at::Tensor u;                                                         // [R] double, on the scores' device
  if (!uniforms.empty())
    u = model::to_device_async(at::tensor(uniforms, at::TensorOptions().dtype(at::kDouble)), scores.device());
  kernels::PickArgs args;
  args.rows = R;
  args.vocab = scores.size(1);
  args.scores = scores.data_ptr<float>();
  args.uniforms = u.defined() ? u.data_ptr<double>() : nullptr;
  args.out_tokens = out.data_ptr<int64_t>();
  model::backend_of(scores.device())->pick(args);
  return out;
}

}  // namespace specdec::sampling
