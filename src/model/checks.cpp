#include "model/checks.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "model/device.h"

namespace specdec::model {

std::string shape_str(at::IntArrayRef shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

void check_forward_inputs(const std::string& who, const ModelConfig& cfg, int64_t cache_heads,
                          int64_t max_positions, const at::Tensor& tokens,
                          const std::vector<int64_t>& start_pos, const KVCache& cache,
                          const std::vector<int64_t>& n_fed, bool check_ids) {
  SD_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) > 0, who,
           ": tokens must be [B, T] with T >= 1, got ",
           tokens.defined() ? shape_str(tokens.sizes()) : std::string("undefined"));
  const int64_t B = tokens.size(0), T_all = tokens.size(1);
  SD_CHECK(static_cast<int64_t>(start_pos.size()) == B, who, ": ", start_pos.size(),
           " start positions for a batch of ", B);
  SD_CHECK(n_fed.empty() || static_cast<int64_t>(n_fed.size()) == B, who, ": n_fed has ", n_fed.size(),
           " entries for a batch of ", B);
  for (size_t b = 0; b < n_fed.size(); ++b)
    SD_CHECK(n_fed[b] >= 0 && n_fed[b] <= T_all, who, ": n_fed[", b, "] = ", n_fed[b], " must be in [0, ", T_all,
             "] (T of the tokens tensor)");
  SD_CHECK(cache.batch() == B && cache.n_layers() == cfg.n_layers && cache.n_kv_heads() == cache_heads &&
               cache.head_dim() == cfg.head_dim,
           who, ": cache [layers ", cache.n_layers(), ", batch ", cache.batch(), ", kv heads ",
           cache.n_kv_heads(), ", head_dim ", cache.head_dim(), "] does not fit this model/batch (batch ", B, ")");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t T = n_fed.empty() ? T_all : n_fed[b];
    SD_CHECK(start_pos[b] >= 0 && start_pos[b] <= cache.length(b), who, ": start_pos[", b, "] = ", start_pos[b],
             " but the cache holds ", cache.length(b), " positions");
    SD_CHECK(start_pos[b] + T <= cache.max_seq(), who, ": sequence ", b, " would reach ", start_pos[b] + T,
             " positions, cache max_seq is ", cache.max_seq());
    SD_CHECK(max_positions <= 0 || start_pos[b] + T <= max_positions, who, ": sequence ", b, " would reach ",
             start_pos[b] + T, " positions, beyond the learned position table n_ctx = ", max_positions);
  }
  if (!check_ids) return;
  const at::Tensor ids = tokens.to(at::kLong).contiguous();
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < B * T_all; ++i)
    SD_CHECK((!n_fed.empty() && i % T_all >= n_fed[i / T_all]) || (p[i] >= 0 && p[i] < cfg.n_vocab), who,
             ": token id ", p[i], " at [", i / T_all, ", ", i % T_all, "] out of range [0, ", cfg.n_vocab, ")");
}

void refuse_ragged(const std::string& who, const at::Tensor& tokens, const ForwardOptions& o) {
  SD_CHECK(o.parents.empty() || static_cast<int64_t>(o.parents.size()) == o.tree_cached + tokens.size(1), who,
           ": a tree per sequence (", o.parents.size(), " parent entries for ", tokens.size(0), " x ",
           o.tree_cached + tokens.size(1), " nodes) is not supported by this engine; use the packed llama engine");
  for (size_t b = 0; b < o.n_fed.size(); ++b)
    SD_CHECK(o.n_fed[b] == tokens.size(1), who, ": ragged batches (ForwardOptions::n_fed[", b, "] = ", o.n_fed[b],
             " < T = ", tokens.size(1), ") are not supported by this engine; use the packed llama engine");
}

at::Tensor last_logit_rows(const at::Tensor& logits, const std::vector<int64_t>& n_fed, int64_t k) {
  const int64_t B = logits.size(0), T = logits.size(1);
  if (T == k) return logits;
  at::Tensor out = at::zeros({B, k, logits.size(2)}, logits.options());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = n_fed.empty() ? T : n_fed[static_cast<size_t>(b)], m = std::min(n, k);
    if (m > 0) out[b].narrow(0, 0, m).copy_(logits[b].narrow(0, n - m, m));
  }
  return out;
}

void check_forward_options(const std::string& who, const ModelConfig& cfg, const at::Tensor& tokens,
                           const std::vector<int64_t>& start_pos, const ForwardOptions& o) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  SD_CHECK(o.logits_last >= 0, who, ": logits_last = ", o.logits_last, " must be >= 0 (0: every fed row)");
  for (int64_t b = 0; b < B; ++b)
    SD_CHECK(start_pos[b] >= o.tree_cached, who, ": tree_cached = ", o.tree_cached, " nodes but sequence ", b,
             " starts at slot ", start_pos[b]);
  const bool on_device = o.device_parents.defined();
  SD_CHECK(o.tree_cached >= 0 && (o.tree_cached == 0 || !o.parents.empty() || on_device), who, ": tree_cached = ",
           o.tree_cached, " needs a tree (parents) and must be >= 0");
  if (on_device) {
    const int64_t n = o.tree_cached + T, size = o.device_parents.numel();
    SD_CHECK(o.parents.empty(), who, ": a tree comes as parents or as device_parents, not both");
    SD_CHECK(o.device_parents.scalar_type() == at::kLong && o.device_parents.dim() == 1 && (size == n || size == B * n),
             who, ": device_parents must be [", n, "] or [", B, " x ", n, "] int64, got ",
             at::toString(o.device_parents.scalar_type()), " with ", size, " entries");
  }
  if (!o.parents.empty()) {
    const int64_t n = o.tree_cached + T, size = static_cast<int64_t>(o.parents.size());
    SD_CHECK(size == n || size == B * n, who, ": tree has ", size, " parent entries for ", o.tree_cached,
             " cached + ", T, " fed tokens (one tree: ", n, " entries; one per sequence: ", B, " x ", n, ")");
    for (int64_t i = 0; i < size; ++i)
      SD_CHECK(o.parents[i] >= -1 && o.parents[i] < i % n, who, ": tree parents[", i, "] = ", o.parents[i],
               " must be in [-1, ", i % n, ") (a token's parent comes before it; -1 = follows the cache)");
  }
  if (!o.positions.empty()) {
    SD_CHECK(static_cast<int64_t>(o.positions.size()) == B * T, who, ": ", o.positions.size(),
             " positions for ", B, " x ", T, " fed tokens");
    // Positions size the RoPE table: bound them by the trained context (or 2^16 without one).
    const int64_t limit = std::max<int64_t>(cfg.n_ctx, int64_t{1} << 16);
    for (int64_t i = 0; i < B * T; ++i)
      SD_CHECK(o.positions[i] >= 0 && o.positions[i] < limit, who, ": positions[", i, "] = ", o.positions[i],
               " is outside [0, ", limit, ")");
  }
  for (size_t i = 0; i < o.layers.size(); ++i)
    SD_CHECK(o.layers[i] >= 0 && o.layers[i] < cfg.n_layers && (i == 0 || o.layers[i] > o.layers[i - 1]), who,
             ": layers[", i, "] = ", o.layers[i], ": the layer subset must be strictly ascending in [0, ",
             cfg.n_layers, ")");
  SD_CHECK(o.hidden_layer >= -1 && o.hidden_layer < cfg.n_layers, who, ": hidden_layer = ", o.hidden_layer,
           " must be -1 (none) or in [0, ", cfg.n_layers, ")");
}

const int32_t* tree_of(const ForwardOptions& o, int64_t b, int64_t T) {
  if (o.parents.empty()) return nullptr;
  const int64_t n = o.tree_cached + T;
  return o.parents.data() + (static_cast<int64_t>(o.parents.size()) == n ? 0 : b * n);
}

const ForwardOptions& read_device_parents(const ForwardOptions& o, ForwardOptions& copy) {
  if (!o.device_parents.defined()) return o;
  copy = o;
  const at::Tensor& t = o.device_parents;  // on the CPU already (a host engine's own device): a copy
  const at::Tensor host = (t.is_cpu() ? t : on_host(t)).to(at::kInt).contiguous();
  copy.parents.assign(host.data_ptr<int32_t>(), host.data_ptr<int32_t>() + host.numel());
  copy.device_parents = at::Tensor();
  return copy;
}

std::vector<int64_t> fed_positions(const std::vector<int64_t>& start_pos, int64_t T, const ForwardOptions& o) {
  if (!o.positions.empty()) return o.positions;
  const int64_t c = o.tree_cached, n = c + T;
  std::vector<int64_t> depth(n), pos;
  pos.reserve(start_pos.size() * T);
  for (size_t b = 0; b < start_pos.size(); ++b) {
    const int32_t* parents = tree_of(o, static_cast<int64_t>(b), T);
    for (int64_t t = 0; t < n; ++t) depth[t] = !parents ? t : (parents[t] < 0 ? 0 : depth[parents[t]] + 1);
    for (int64_t t = 0; t < T; ++t) pos.push_back(start_pos[b] - c + depth[c + t]);
  }
  return pos;
}

void tree_ancestors(const std::vector<int32_t>& parents, std::vector<int64_t>& anc, std::vector<int64_t>& begin) {
  tree_ancestors(parents.data(), static_cast<int64_t>(parents.size()), anc, begin);
}

void tree_ancestors(const int32_t* parents, int64_t T, std::vector<int64_t>& anc, std::vector<int64_t>& begin) {
  anc.clear();
  begin.clear();
  if (T == 0) return;
  begin.assign(T + 1, 0);
  for (int64_t t = 0; t < T; ++t) {
    const size_t first = anc.size();
    for (int64_t a = t; a >= 0; a = parents[a]) anc.push_back(a);
    std::reverse(anc.begin() + static_cast<std::ptrdiff_t>(first), anc.end());  // root first
    begin[t + 1] = static_cast<int64_t>(anc.size());
  }
}

at::Tensor ancestor_sets(const at::Tensor& parents) {
  const int64_t R = parents.size(0), N = parents.size(1);
  // jump[i]: the 2^k-th ancestor of i; N (a row of zeros appended below) past the root.
  at::Tensor jump = parents.clamp(-1, N - 1);
  jump = jump.masked_fill(jump < 0, N);
  at::Tensor anc = at::eye(N, parents.options().dtype(at::kBool)).expand({R, N, N});
  const at::Tensor none = at::zeros({R, 1, N}, anc.options());
  const at::Tensor past = at::full({R, 1}, N, jump.options());
  for (int64_t reach = 1; reach < N; reach *= 2) {  // anc: the ancestors fewer than 2 reach steps up
    anc = anc | at::cat({anc, none}, 1).gather(1, jump.unsqueeze(2).expand({R, N, N}));
    jump = at::cat({jump, past}, 1).gather(1, jump);
  }
  return anc;
}

}  // namespace specdec::model
