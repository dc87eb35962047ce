// PrefixReuse: one prompt's prefill, computed once and copied into every cache that starts with it.
#include "model/prefix_reuse.h"

#include <algorithm>

#include "core/error.h"

namespace specdec::model {

PrefixReuse::PrefixReuse(std::shared_ptr<CausalLM> inner, const std::vector<int64_t>& prefix)
    : inner_(std::move(inner)), prefix_(prefix) {
  SD_CHECK(inner_, "PrefixReuse: no model");
  SD_CHECK(!prefix_.empty(), "PrefixReuse: empty prefix");
  const int64_t P = static_cast<int64_t>(prefix_.size());
  KVCache cache = inner_->make_cache(1, P);
  const at::Tensor ids = at::tensor(prefix_, at::kLong).view({1, P}).to(inner_->device());
  logits_ = inner_->forward(ids, {0}, cache, ForwardOptions{}).logits[0];  // [P, V]
  for (int64_t l = 0; l < cache.n_layers(); ++l) {
    k_.push_back(cache.k(l)[0].narrow(1, 0, P).clone());  // [H, P, D]
    v_.push_back(cache.v(l)[0].narrow(1, 0, P).clone());
  }
}

namespace {

// Only what a plain prefill looks like: chains, default positions, every layer, logits only
// (ragged batches allowed: n_fed).
bool plain(const ForwardOptions& o) {
  return o.parents.empty() && !o.device_parents.defined() && o.tree_cached == 0 && o.positions.empty() &&
         o.layers.empty() && o.logits && !o.final_hidden && o.hidden_layer < 0;
}

}  // namespace

ForwardResult PrefixReuse::forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, KVCache& cache,
                                   const ForwardOptions& options) {
  // A single sequence, or a batch, dense or ragged (n_fed): each sequence's row is matched on its
  // own. Served rows leave a batch ragged, so a batch needs an engine that takes ragged batches.
  // (A batch of newcomers that all feed the prompt is dense: forward_batch drops n_fed there.)
  const bool ragged = !options.n_fed.empty();
  if (tokens.dim() != 2 || start_pos.size() != static_cast<size_t>(tokens.size(0)) || !plain(options) ||
      cache.n_layers() != static_cast<int64_t>(k_.size()) || (tokens.size(0) > 1 && !inner_->ragged_batches()) ||
      (ragged && options.n_fed.size() != start_pos.size()))
    return inner_->forward(tokens, start_pos, cache, options);
  const at::Tensor host = tokens.to(at::kCPU, at::kLong).contiguous();
  const int64_t B = host.size(0), T = host.size(1);
  const int64_t P = static_cast<int64_t>(prefix_.size());
  std::vector<int64_t> n(B), m(B, 0);  // fed tokens, of which served from the stored prefill
  for (int64_t b = 0; b < B; ++b) {
    n[b] = ragged ? options.n_fed[b] : T;
    if (start_pos[b] != 0 || n[b] < 0 || n[b] > T) continue;
    const int64_t* t = host.data_ptr<int64_t>() + b * T;
    const int64_t limit = std::min<int64_t>({n[b], P, cache.max_seq()});
    while (m[b] < limit && t[m[b]] == prefix_[static_cast<size_t>(m[b])]) ++m[b];
  }
  if (std::all_of(m.begin(), m.end(), [](int64_t x) { return x == 0; }))
    return inner_->forward(tokens, start_pos, cache, options);

  for (int64_t b = 0; b < B; ++b) {
    if (m[b] == 0) continue;
    for (int64_t l = 0; l < cache.n_layers(); ++l) {
      cache.k(l)[b].narrow(1, 0, m[b]).copy_(k_[static_cast<size_t>(l)].narrow(1, 0, m[b]));
      cache.v(l)[b].narrow(1, 0, m[b]).copy_(v_[static_cast<size_t>(l)].narrow(1, 0, m[b]));
    }
    cache.set_length(b, m[b]);
    reused_tokens_ += m[b];
  }
  // The rest of each row runs on the inner model from where its stored part ends.
  int64_t rest = 0;
  for (int64_t b = 0; b < B; ++b) rest = std::max(rest, n[b] - m[b]);
  at::Tensor inner_logits;  // [B, rest, V]
  if (rest > 0) {
    at::Tensor rest_tokens = at::zeros({B, rest}, at::kLong);  // rows past a sequence's n_fed are not read
    std::vector<int64_t> from(B);
    ForwardOptions o = options;
    o.n_fed.clear();
    o.logits_last = 0;  // every row: they are placed below (the caller takes the last ones)
    for (int64_t b = 0; b < B; ++b) {
      rest_tokens[b].narrow(0, 0, n[b] - m[b]).copy_(host[b].narrow(0, m[b], n[b] - m[b]));
      from[b] = start_pos[b] + m[b];
      if (B > 1) o.n_fed.push_back(n[b] - m[b]);
    }
    inner_logits = inner_->forward(rest_tokens.to(tokens.device()), from, cache, o).logits;
  }
  ForwardResult out;
  out.logits = at::empty({B, T, logits_.size(1)}, logits_.options());
  for (int64_t b = 0; b < B; ++b) {
    if (m[b] > 0) out.logits[b].narrow(0, 0, m[b]).copy_(logits_.narrow(0, 0, m[b]));
    if (n[b] > m[b]) out.logits[b].narrow(0, m[b], n[b] - m[b]).copy_(inner_logits[b].narrow(0, 0, n[b] - m[b]));
    if (n[b] < T) out.logits[b].narrow(0, n[b], T - n[b]).zero_();  // unfed rows are zero, as the engine's
  }
  return out;
}

}  // namespace specdec::model
