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

// Only what a plain prefill looks like: one chain, default positions, every layer, logits only.
bool plain(const ForwardOptions& o) {
  return o.parents.empty() && o.tree_cached == 0 && o.positions.empty() && o.layers.empty() && o.n_fed.empty() &&
         o.logits && !o.final_hidden && o.hidden_layer < 0;
}

}  // namespace

ForwardResult PrefixReuse::forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, KVCache& cache,
                                   const ForwardOptions& options) {
  if (tokens.dim() != 2 || tokens.size(0) != 1 || start_pos != std::vector<int64_t>{0} || !plain(options) ||
      cache.n_layers() != static_cast<int64_t>(k_.size()))
    return inner_->forward(tokens, start_pos, cache, options);
  const at::Tensor host = tokens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* t = host.data_ptr<int64_t>();
  const int64_t T = host.size(1);
  const int64_t limit = std::min<int64_t>({T, static_cast<int64_t>(prefix_.size()), cache.max_seq()});
  int64_t m = 0;
  while (m < limit && t[m] == prefix_[static_cast<size_t>(m)]) ++m;
  if (m == 0) return inner_->forward(tokens, start_pos, cache, options);

  for (int64_t l = 0; l < cache.n_layers(); ++l) {
    cache.k(l)[0].narrow(1, 0, m).copy_(k_[static_cast<size_t>(l)].narrow(1, 0, m));
    cache.v(l)[0].narrow(1, 0, m).copy_(v_[static_cast<size_t>(l)].narrow(1, 0, m));
  }
  cache.set_length(0, m);
  reused_tokens_ += m;
  ForwardResult out;
  out.logits = logits_.narrow(0, 0, m).unsqueeze(0);  // [1, m, V]
  if (m < T) {
    const at::Tensor rest = inner_->forward(tokens.narrow(1, m, T - m), {m}, cache, options).logits;
    out.logits = at::cat({out.logits, rest}, 1);
  } else {
    out.logits = out.logits.clone();  // the caller may write into its result
  }
  return out;
}

}  // namespace specdec::model
