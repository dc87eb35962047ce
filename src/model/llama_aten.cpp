// The Llama family with ATen ops on any device (see llama_aten.h).
#include "model/llama_aten.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "core/log.h"
#include "model/checks.h"
#include "model/device.h"
#include "model/linear.h"
#include "model/loader.h"
#include "model/step_graph.h"

namespace specdec::model {

at::Tensor rms_norm_aten(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + eps) * w;
}

at::Tensor rope_rotate_half(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

at::Tensor linear_aten(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (!x.is_cpu() || x.dim() != 2 || w.dim() != 2 || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat)
    return at::linear(x, w, b);
  const bool grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  if (grad && library_path(x.size(0)) == LinearPath::kDnnl) return at::linear(x, w, b);  // raw memory: no autograd
  return library_product(x, w, b);
}

namespace {

// y = x W^T (+ b): x [N, in] fp32 -> [N, out]. bf16 weights take x rounded to bf16 and give
// bf16 results: exact in fp32, so every consumer either promotes them in its own kernel (an
// fp32 add_, RoPE's products with fp32 tables) or takes them .to(kFloat) where it needs fp32
// storage; each launch saved is time on a GPU (a step is ~50 launches per layer).
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  if (w.scalar_type() == at::kFloat) return b.defined() ? linear_aten(x, w).add_(b) : linear_aten(x, w);
  const at::Tensor y = at::linear(x.to(w.scalar_type()), w);
  return b.defined() ? y.to(at::kFloat).add_(b) : y;
}


struct Layer {
  at::Tensor attn_norm, ffn_norm;  // [d] fp32
  at::Tensor wqkv, bqkv;           // q, k and v stacked: [q_dim + 2 kv_dim, d]; bias fp32 or undefined
  at::Tensor wo;                   // [d, q_dim]
  at::Tensor w_gate_up;            // gate and up stacked: [2 d_ff, d]
  at::Tensor w_down;               // [d, d_ff]
};

// The inputs of one forward that every layer shares, all on the model's device.
struct Step {
  int64_t B = 0, T = 0, S = 0;  // S: keys any row attends to are in cache slots [0, S)
  at::Tensor seq, slot;         // [B*T] int64: sequence and cache slot of each fed row
  at::Tensor cos, sin;          // [B*T, 1, hd/2] RoPE factors at each row's position
  at::Tensor mask;              // [B, 1, 1, T, S] fp32: 0 where the row attends, -inf elsewhere
  // A ragged batch (ForwardOptions::n_fed), eager path: the rows whose K/V go to the cache
  // [n_fed rows] int64, and the padding rows t >= n_fed[b] [B, T, 1] bool. Undefined: all rows
  // are fed. (The static steps write padding rows past the sequence's new length instead.)
  at::Tensor written, padding;
};

// A static step: one captured graph for a (cache, batch, bucket of fed tokens, outputs) key.
// Its inputs are one int64 buffer: [seq | slot | position | tree base | token id | adds depth]
// each [B*Tb], then the parents [n_trees, W] of the nodes the rows may see: one tree for the
// whole batch (a chain, or one tree), or one per sequence (a tree each). The step builds the
// ancestor sets, the depths and the mask from them (ancestor_sets).
struct StaticStep {
  std::vector<const void*> cache_id;  // the data pointers of the cache's K and V tensors
  int64_t B = 0, Tb = 0, S = 0;  // S: the cache's slots, which every row's attention spans
  int64_t n_trees = 1;           // ancestor matrices: 1, or B (ForwardOptions::parents of B trees)
  int64_t W = 0;                 // their columns: the tree's nodes a row may see (Tb, or more
                                 // when tree_cached nodes are in the cache before the fed ones)
  std::vector<int64_t> layers;
  int64_t hidden_layer = -1;
  bool final_hidden = false, logits = true;
  std::unique_ptr<StepGraph> graph;
  ForwardResult out;  // [B, Tb, ...]: written by every run (graph memory when captured)
};

// Fed-token counts of the static steps: exact up to 8 (chains of gamma <= 7), then ~1.5x apart.
constexpr int64_t k_step_buckets[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128};

// Ragged batches (ForwardOptions::n_fed): sequence b feeds the first fed_count rows of T.
int64_t fed_count(const ForwardOptions& o, int64_t b, int64_t T) { return o.n_fed.empty() ? T : o.n_fed[b]; }
bool ragged(const ForwardOptions& o, int64_t T) {
  return std::any_of(o.n_fed.begin(), o.n_fed.end(), [T](int64_t n) { return n < T; });
}
// [B, T, 1] bool on the host: true for the rows t >= n_fed[b].
at::Tensor padding_rows(const std::vector<int64_t>& n_fed, int64_t T) {
  const int64_t B = static_cast<int64_t>(n_fed.size());
  at::Tensor pad = at::zeros({B, T, 1}, at::kBool);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = n_fed[b]; t < T; ++t) pad.data_ptr<bool>()[b * T + t] = true;
  return pad;
}
// The rows a ragged batch did not feed are zero in every output.
void zero_padding(ForwardResult& r, const at::Tensor& padding) {
  for (at::Tensor* t : {&r.logits, &r.hidden, &r.layer_hidden})
    if (t->defined()) t->masked_fill_(padding, 0);
}

// Token ids [B, T] as int64 on `device` with the padding rows' ids (t >= n_fed[b]: any value,
// never read) set to 0. Ids that come from the device (a draft loop's picks) are checked there,
// with no read: model::check_later reports a bad one after the loop's next read.
at::Tensor device_ids(const at::Tensor& tokens, const at::Tensor& padding, const at::Device& device, int64_t n_vocab,
                      const std::string& who) {
  at::Tensor ids = to_device_async(tokens, device).to(at::kLong);  // [B, T]
  if (padding.defined()) ids = ids.masked_fill(padding.view(ids.sizes()), 0);
  if (!tokens.is_cpu())
    check_later(((ids < 0) | (ids >= n_vocab)).any(), [who, n_vocab] {
      fail(who, ": a token id fed from the device is out of range [0, ", n_vocab, ")");
    });
  return ids;
}

// Tree entries in ForwardOptions (parents or device_parents): 0 for a chain.
int64_t tree_entries(const ForwardOptions& o) {
  return o.device_parents.defined() ? o.device_parents.numel() : static_cast<int64_t>(o.parents.size());
}

// The tree's parents as [n_trees, N] int64 on `device` (N = tree_cached + T nodes each): the
// device's own (a tree grown there, unread) or the host's, copied without a wait.
at::Tensor tree_parents(const ForwardOptions& o, int64_t N, const at::Device& device) {
  if (o.device_parents.defined()) return o.device_parents.to(device).view({-1, N});
  return to_device_async(at::tensor(o.parents, at::kInt).to(at::kLong), device).view({-1, N});
}

class LlamaAtenModel final : public CausalLM {
 public:
  LlamaAtenModel(const ModelConfig& cfg, LlamaTensors t, at::ScalarType dtype, at::Device device, bool static_steps)
      // "cuda" without an index means the current device: name it, so that device() equals the
      // device of every tensor made on it (cuda:0, not cuda).
      : cfg_(cfg), device_(at::empty({0}, at::TensorOptions().device(device)).device()), static_steps_(static_steps) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device_);
    const auto wdt = at::TensorOptions().dtype(dtype).device(device_);
    for (auto& L : t.layers) {
      Layer y;
      y.attn_norm = L.attn_norm.to(f32).contiguous();
      y.ffn_norm = L.ffn_norm.to(f32).contiguous();
      // Stacked projections read the same input: one matmul instead of three (two).
      y.wqkv = at::cat({L.wq, L.wk, L.wv}).to(wdt).contiguous();
      if (cfg.qkv_bias) y.bqkv = at::cat({L.bq, L.bk, L.bv}).to(f32).contiguous();
      y.wo = L.wo.to(wdt).contiguous();
      y.w_gate_up = at::cat({L.w_gate, L.w_up}).to(wdt).contiguous();
      y.w_down = L.w_down.to(wdt).contiguous();
      L = LlamaLayerTensors();  // release the host copies as we go
      layers_.push_back(std::move(y));
    }
    out_norm_ = t.out_norm.to(f32).contiguous();
    tok_embd_ = t.tok_embd.to(f32).contiguous();
    cfg_.tie_embeddings = !t.output.defined();
    // Tied fp32 weights: one tensor serves as embedding and head; bf16 gets its own head copy.
    output_ = cfg_.tie_embeddings ? tok_embd_.to(wdt) : t.output.to(wdt).contiguous();
    inv_freq_ = rope_inv_freq(cfg_);  // on the host, as the packed engine's
    if (t.rope_freqs.defined()) inv_freq_ = inv_freq_ / t.rope_freqs.to(at::kFloat);
  }

  const ModelConfig& config() const override { return cfg_; }
  at::Device device() const override { return device_; }
  bool ragged_batches() const override { return true; }

  // With static steps, caches are pooled: capacity rounded up to 256 slots, and a cache no one
  // holds any more is handed out again, so that the next generation replays the graphs captured
  // on it instead of capturing new ones.
  KVCache make_cache(int64_t batch, int64_t max_seq) const override {
    if (!static_steps_) return KVCache(cfg_.n_layers, batch, cfg_.n_kv_heads, max_seq, cfg_.head_dim, at::kFloat, device_);
    const int64_t cap = (max_seq + 255) / 256 * 256;
    for (KVCache& c : cache_pool_)  // cache_pool_ is mutable: a pool, not the model's state
      if (c.batch() == batch && c.max_seq() == cap && c.k(0).use_count() == 1) return c;  // lengths 0
    cache_pool_.emplace_back(cfg_.n_layers, batch, cfg_.n_kv_heads, cap, cfg_.head_dim, at::kFloat, device_);
    return cache_pool_.back();
  }

  int64_t weight_bytes() const override {
    const auto bytes = [](const at::Tensor& t) {
      return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : int64_t{0};
    };
    int64_t n = bytes(output_) + bytes(out_norm_);
    for (const Layer& L : layers_)
      for (const at::Tensor* w : {&L.attn_norm, &L.ffn_norm, &L.wqkv, &L.bqkv, &L.wo, &L.w_gate_up, &L.w_down})
        n += bytes(*w);
    return n + cfg_.d_model * 4;  // plus one embedding row per token
  }

  int64_t resident_weight_bytes() const override {
    const bool tied = output_.defined() && tok_embd_.defined() && output_.data_ptr() == tok_embd_.data_ptr();
    const int64_t table = tied ? 0 : tok_embd_.numel() * static_cast<int64_t>(tok_embd_.element_size());
    return weight_bytes() - cfg_.d_model * 4 + table;
  }

  at::Tensor embed(const at::Tensor& ids) const override {
    return at::embedding(tok_embd_, to_device_async(ids.to(at::kLong).reshape({-1}), device_));
  }
  at::Tensor head_rows(const at::Tensor& ids) const override {
    return output_.index_select(0, to_device_async(ids.to(at::kLong).reshape({-1}), device_)).to(at::kFloat);
  }
  at::Tensor output_head(const at::Tensor& hidden) const override {
    return project(to_device_async(hidden, device_), output_).to(at::kFloat);
  }

  using CausalLM::forward;
  ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, KVCache& cache,
                        const ForwardOptions& options) override;

 private:
  bool ensure_rope_table(int64_t n_pos);
  Step make_step(int64_t B, int64_t T, const std::vector<int64_t>& start_pos, const ForwardOptions& opt);
  at::Tensor attention(const Step& s, const Layer& w, int64_t layer, const at::Tensor& xn, KVCache& cache);
  // The layers, norm and head over one step's inputs: device work only (what a graph captures).
  ForwardResult run_layers(const at::Tensor& ids, const Step& s, KVCache& cache, const ForwardOptions& opt);
  // The static-step path: nullptr when this forward cannot take it (then the eager path runs).
  StaticStep* static_step(int64_t B, int64_t T, const std::vector<int64_t>& start_pos, KVCache& cache,
                          const ForwardOptions& opt);
  ForwardResult forward_static(StaticStep& st, const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                               KVCache& cache, const ForwardOptions& opt);

  ModelConfig cfg_;
  at::Device device_;
  at::Tensor tok_embd_;   // [V, d] fp32
  std::vector<Layer> layers_;
  at::Tensor out_norm_;   // [d] fp32
  at::Tensor output_;     // [V, d] in the weight dtype (tok_embd_ itself when tied and fp32)
  at::Tensor inv_freq_;   // [hd/2] fp32, host
  at::Tensor cos_, sin_;  // [n_pos, hd/2] fp32 tables on the device, grown on demand
  bool static_steps_ = false;                       // ModelSpec::graphs
  std::vector<std::unique_ptr<StaticStep>> steps_;  // captured steps, newest last
  mutable std::vector<KVCache> cache_pool_;         // make_cache with static steps
};

// Returns true when the tables were (re)allocated.
bool LlamaAtenModel::ensure_rope_table(int64_t n_pos) {
  if (cos_.defined() && cos_.size(0) >= n_pos) return false;
  const int64_t n = std::max<int64_t>(n_pos, cos_.defined() ? 2 * cos_.size(0) : 256);
  // fp32 products position * inv_freq as HF (and llama.cpp's table) computes them, on the host
  // so that every device starts from the same angles.
  const at::Tensor ang = at::outer(at::arange(n, at::kFloat), inv_freq_);  // [n, hd/2]
  cos_ = ang.cos().to(device_);
  sin_ = ang.sin().to(device_);
  return true;
}

// Host index vectors -> device tensors, once per forward: one copy for the per-row indices,
// one for a tree's parents (none when they are on the device already); the ancestor sets,
// tree positions and mask are then built on the device.
Step LlamaAtenModel::make_step(int64_t B, int64_t T, const std::vector<int64_t>& start_pos,
                               const ForwardOptions& opt) {
  Step s;
  s.B = B;
  s.T = T;
  const int64_t n = B * T, tc = opt.tree_cached;
  // A ragged batch's padding rows (t >= n_fed[b]) are computed but neither cached nor read:
  // the keys span the slots the fed rows reach, and a padding row attends to slot 0 alone.
  s.S = 1;
  for (int64_t b = 0; b < B; ++b) s.S = std::max(s.S, start_pos[b] + fed_count(opt, b, T));
  if (ragged(opt, T)) {
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < opt.n_fed[b]; ++t) rows.push_back(b * T + t);
    s.written = to_device_async(at::tensor(rows, at::kLong), device_);
    s.padding = to_device_async(padding_rows(opt.n_fed, T), device_);
  }
  // A tree row's position is the prefix length plus its depth, which the device counts from
  // the ancestor sets; other rows' positions come from the host (fed_positions).
  const bool tree = tree_entries(opt) > 0, by_depth = tree && opt.positions.empty();
  const std::vector<int64_t> pos = by_depth ? std::vector<int64_t>() : fed_positions(start_pos, T, opt);
  int64_t max_pos = 0;
  for (int64_t b = 0; b < B; ++b) max_pos = std::max(max_pos, start_pos[b] + T);  // bounds prefix + depth
  for (int64_t p : pos) max_pos = std::max(max_pos, p + 1);
  ensure_rope_table(max_pos);
  // Rows: sequence, cache slot, position (by_depth: the prefix length), first slot of the tree
  // (start - tree_cached).
  at::Tensor host = at::empty({4, n}, at::kLong);
  int64_t* p = host.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t;
      p[i] = b;
      p[n + i] = start_pos[b] + t;
      p[2 * n + i] = by_depth ? start_pos[b] - tc : pos[i];
      p[3 * n + i] = start_pos[b] - tc;
    }
  }
  const at::Tensor idx = to_device_async(host, device_);  // no wait: a plain copy would block
  s.seq = idx[0];
  s.slot = idx[1];
  const at::Tensor key = at::arange(s.S, at::TensorOptions().dtype(at::kLong).device(device_)).view({1, 1, s.S});
  at::Tensor visible, position = idx[2];  // visible: [B, T, S]
  if (!tree) {
    // A chain row attends to every slot up to its own.
    visible = key <= s.slot.view({B, T, 1});
  } else {
    // A tree row attends to the slots before the tree and to the slots of its ancestors:
    // key slot j holds tree node j - (start - tree_cached).
    const int64_t N = tc + T;
    const at::Tensor ancestors = ancestor_sets(tree_parents(opt, N, device_)).narrow(1, tc, T).expand({B, T, N});
    if (by_depth) position = position + (ancestors.sum(2) - 1).reshape({n});
    const at::Tensor node = key - idx[3].view({B, T, 1});  // [B, T, S]
    const at::Tensor is_ancestor = at::gather(ancestors, 2, node.clamp(0, N - 1)) & (node >= 0) & (node < N);
    visible = (node < 0) | is_ancestor;
  }
  const int64_t half = cfg_.head_dim / 2;
  s.cos = cos_.index_select(0, position).view({n, 1, half});
  s.sin = sin_.index_select(0, position).view({n, 1, half});
  if (s.padding.defined()) visible = at::where(s.padding, key == 0, visible);
  s.mask = at::zeros({B, T, s.S}, at::TensorOptions().dtype(at::kFloat).device(device_))
               .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity())
               .view({B, 1, 1, T, s.S});
  return s;
}

// xn: [B*T, d] -> [B*T, d]. Writes the rows' K/V into their cache slots, then attends.
at::Tensor LlamaAtenModel::attention(const Step& s, const Layer& w, int64_t layer, const at::Tensor& xn,
                                     KVCache& cache) {
  using at::indexing::Slice;
  const int64_t B = s.B, T = s.T, n = B * T, H = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  const int64_t hd = cfg_.head_dim, G = H / Hkv, q_dim = H * hd, kv_dim = Hkv * hd;
  const at::Tensor qkv = project(xn, w.wqkv, w.bqkv);  // [n, q_dim + 2 kv_dim], fp32 or bf16
  // RoPE once over the query and key heads together ([n, H + Hkv, hd], fp32 out).
  const at::Tensor qk = rope_rotate_half(qkv.narrow(1, 0, q_dim + kv_dim).view({n, H + Hkv, hd}), s.cos, s.sin);
  const at::Tensor q = qk.narrow(1, 0, H), k = qk.narrow(1, H, Hkv);
  const at::Tensor v = qkv.narrow(1, q_dim + kv_dim, kv_dim).reshape({n, Hkv, hd}).to(at::kFloat);
  // cache[seq[i], :, slot[i], :] = k[i]: the (sequence, slot) pairs are distinct.
  if (s.written.defined()) {
    const at::Tensor seq = s.seq.index_select(0, s.written), slot = s.slot.index_select(0, s.written);
    cache.k(layer).index_put_({seq, Slice(), slot}, k.index_select(0, s.written));
    cache.v(layer).index_put_({seq, Slice(), slot}, v.index_select(0, s.written));
  } else {
    cache.k(layer).index_put_({s.seq, Slice(), s.slot}, k);
    cache.v(layer).index_put_({s.seq, Slice(), s.slot}, v);
  }
  const at::Tensor keys = cache.k(layer).narrow(2, 0, s.S);  // [B, Hkv, S, hd]
  const at::Tensor vals = cache.v(layer).narrow(2, 0, s.S);
  // Query head h reads kv head h / G (HF repeat_kv): view the heads as [Hkv, G] and fold the
  // G group members into the rows, so the kv heads are never copied.
  const at::Tensor qg = q.view({B, T, Hkv, G, hd}).permute({0, 2, 3, 1, 4}).reshape({B, Hkv, G * T, hd});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  at::Tensor scores = at::matmul(qg, keys.transpose(-1, -2)).mul_(scale);  // [B, Hkv, G*T, S]
  scores = scores.view({B, Hkv, G, T, s.S}).add_(s.mask);
  const at::Tensor probs = at::softmax(scores, -1).view({B, Hkv, G * T, s.S});
  const at::Tensor out = at::matmul(probs, vals)                 // [B, Hkv, G*T, hd]
                             .view({B, Hkv, G, T, hd})
                             .permute({0, 3, 1, 2, 4})           // [B, T, Hkv, G, hd]
                             .reshape({n, q_dim});
  return project(out, w.wo);
}

ForwardResult LlamaAtenModel::run_layers(const at::Tensor& ids, const Step& s, KVCache& cache,
                                         const ForwardOptions& opt) {
  const int64_t B = s.B, T = s.T, ff = cfg_.d_ff;
  at::Tensor x = at::embedding(tok_embd_, ids);  // [B*T, d], a fresh tensor: updated in place
  ForwardResult res;
  const auto shape = [&](const at::Tensor& t) { return t.view({B, T, t.size(1)}); };
  size_t next_listed = 0;  // opt.layers is ascending: walk it alongside l
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const bool run = opt.layers.empty() || (next_listed < opt.layers.size() && opt.layers[next_listed] == l);
    if (run) {
      if (!opt.layers.empty()) ++next_listed;
      const Layer& w = layers_[l];
      x.add_(attention(s, w, l, rms_norm_aten(x, w.attn_norm, cfg_.norm_eps), cache));
      const at::Tensor gu = project(rms_norm_aten(x, w.ffn_norm, cfg_.norm_eps), w.w_gate_up).to(at::kFloat);  // [B*T, 2 d_ff]
      x.add_(project(at::silu(gu.narrow(1, 0, ff)).mul_(gu.narrow(1, ff, ff)), w.w_down));
    }
    if (l == opt.hidden_layer) res.layer_hidden = shape(x.clone());
  }
  const at::Tensor xn = rms_norm_aten(x, out_norm_, cfg_.norm_eps);  // [B*T, d]
  if (opt.final_hidden) res.hidden = shape(xn);
  if (opt.logits) res.logits = shape(project(xn, output_).to(at::kFloat));  // [B, T, V] fp32
  return res;
}

// A static step serves a forward whose fed tokens fit a bucket and the cache: chains and
// trees (one for the batch or one per sequence; whole, or grown over several forwards with
// tree_cached nodes already in the cache), ragged or not, any layer subset and outputs. A
// tree's ancestor matrix has W columns, the bucket of tree_cached + Tb (Tb for a whole tree):
// the nodes a row may see, at slots start - tree_cached + node. Fed row t < T of sequence b
// gets slot start_pos[b] + t as in the eager path; the bucket's padding rows (t >= T) write
// their K/V to the slots after them, past the sequence's new length (so never read), and
// attend only to themselves. A ragged batch's padding rows (n_fed[b] <= t < T) also write past
// the new length, with token 0 and their slot as position, and attend as row t of the chain or
// tree (to keys just written or cached: finite); their results are discarded.
StaticStep* LlamaAtenModel::static_step(int64_t B, int64_t T, const std::vector<int64_t>& start_pos, KVCache& cache,
                                        const ForwardOptions& opt) {
  if (!static_steps_) return nullptr;
  const int64_t tc = opt.tree_cached;
  const int64_t n_trees = tree_entries(opt) == B * (tc + T) && B > 1 ? B : 1;
  const int64_t* bucket = std::lower_bound(std::begin(k_step_buckets), std::end(k_step_buckets), T);
  if (bucket == std::end(k_step_buckets)) return nullptr;
  const int64_t Tb = *bucket, S = cache.max_seq();
  const int64_t* columns = std::lower_bound(std::begin(k_step_buckets), std::end(k_step_buckets), tc + Tb);
  if (columns == std::end(k_step_buckets)) return nullptr;
  const int64_t W = tc == 0 ? Tb : *columns;
  if (*std::max_element(start_pos.begin(), start_pos.end()) + Tb > S) return nullptr;
  int64_t max_pos = S;
  for (int64_t p : opt.positions) max_pos = std::max(max_pos, p + 1);
  if (ensure_rope_table(max_pos)) steps_.clear();  // new tables: the captured steps read the old ones
  std::vector<const void*> id;
  for (int64_t l = 0; l < cache.n_layers(); ++l) {
    id.push_back(cache.k(l).data_ptr());
    id.push_back(cache.v(l).data_ptr());
  }
  for (auto& st : steps_)
    if (st->cache_id == id && st->B == B && st->Tb == Tb && st->S == S && st->n_trees == n_trees && st->W == W &&
        st->layers == opt.layers &&
        st->hidden_layer == opt.hidden_layer && st->final_hidden == opt.final_hidden && st->logits == opt.logits)
      return st.get();
  // A cache that is gone cannot come back at the same addresses with another meaning: its
  // steps go when too many pile up (pooled caches keep theirs).
  if (steps_.size() >= 64) steps_.erase(steps_.begin());
  auto st = std::make_unique<StaticStep>();
  st->cache_id = std::move(id);
  st->B = B;
  st->Tb = Tb;
  st->S = S;
  st->n_trees = n_trees;
  st->W = W;
  st->layers = opt.layers;
  st->hidden_layer = opt.hidden_layer;
  st->final_hidden = opt.final_hidden;
  st->logits = opt.logits;
  st->graph = std::make_unique<StepGraph>(device_, 6 * B * Tb + n_trees * W);
  steps_.push_back(std::move(st));
  return steps_.back().get();
}

ForwardResult LlamaAtenModel::forward_static(StaticStep& st, const at::Tensor& tokens,
                                             const std::vector<int64_t>& start_pos, KVCache& cache,
                                             const ForwardOptions& opt) {
  const int64_t B = st.B, T = tokens.size(1), Tb = st.Tb, W = st.W, n = B * Tb, S = cache.max_seq();
  const int64_t tc = opt.tree_cached;
  // The inputs, built on the host and uploaded in one copy; the token ids, and a tree's parents
  // grown on the device, follow from where they are (a draft loop's own picks are there).
  // Positions: a fed row of a tree or a chain without explicit positions is the prefix length
  // plus its depth, which the step counts; other rows' come from here.
  const bool by_depth = opt.positions.empty();
  const std::vector<int64_t> pos = by_depth ? std::vector<int64_t>() : fed_positions(start_pos, T, opt);
  std::vector<int64_t> in(6 * n + st.n_trees * W, 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tb; ++t) {
      const int64_t i = b * Tb + t;
      const bool fed = t < fed_count(opt, b, T);
      in[i] = b;
      in[n + i] = start_pos[b] + t;
      in[2 * n + i] = !fed ? start_pos[b] + t : by_depth ? start_pos[b] - tc : pos[b * T + t];
      in[3 * n + i] = start_pos[b] - tc;  // the slot of tree node 0 (a chain: of fed row 0)
      in[4 * n + i] = 0;  // the token ids: copied in below, from wherever they are
      in[5 * n + i] = fed && by_depth;  // the row's position adds its depth
    }
  }
  // Parents [n_trees, W] over the nodes a row may see: the tree's, a chain's (t - 1), and -1 for
  // the bucket's padding rows (node tc + t, t >= T), which so see only themselves.
  for (int64_t tree = 0; tree < st.n_trees; ++tree) {
    int64_t* par = in.data() + 6 * n + tree * W;
    std::fill(par, par + W, -1);
    if (const int32_t* parents = tree_of(opt, tree, T)) {
      std::copy(parents, parents + tc + T, par);
    } else if (!opt.device_parents.defined()) {
      for (int64_t t = 1; t < T; ++t) par[t] = t - 1;
    }
  }
  st.graph->upload(in);
  if (opt.device_parents.defined())
    st.graph->inputs().narrow(0, 6 * n, st.n_trees * W).view({st.n_trees, W}).narrow(1, 0, tc + T).copy_(
        tree_parents(opt, tc + T, device_));
  const at::Tensor padding = ragged(opt, T) ? to_device_async(padding_rows(opt.n_fed, T), device_) : at::Tensor();
  st.graph->inputs().narrow(0, 4 * n, n).view({B, Tb}).narrow(1, 0, T).copy_(
      device_ids(tokens, padding, device_, cfg_.n_vocab, "llama aten forward"));
  // The step: device work on the input buffer only (it is what the graph captures).
  const auto step = [&, this] {
    const at::Tensor x = st.graph->inputs();
    Step s;
    s.B = B;
    s.T = Tb;
    s.S = S;
    s.seq = x.narrow(0, 0, n);
    s.slot = x.narrow(0, n, n);
    const at::Tensor base = x.narrow(0, 3 * n, n), tokens = x.narrow(0, 4 * n, n);
    // Row t is node tc + t (its slot minus the tree's first); its ancestor set, over W nodes.
    const at::Tensor sets = ancestor_sets(x.narrow(0, 6 * n, st.n_trees * W).view({st.n_trees, W}));
    const at::Tensor row_node = (s.slot - base).clamp(0, W - 1).view({B, Tb, 1}).expand({B, Tb, W});
    const at::Tensor a = sets.expand({B, W, W}).gather(1, row_node);  // [B, Tb, W]
    const at::Tensor p = x.narrow(0, 2 * n, n) + x.narrow(0, 5 * n, n) * (a.sum(2).reshape({n}) - 1);
    const int64_t half = cfg_.head_dim / 2;
    s.cos = cos_.index_select(0, p).view({n, 1, half});
    s.sin = sin_.index_select(0, p).view({n, 1, half});
    // Key slot j holds node j - base of the tree (a chain: of the fed block): before it the
    // prefix, which every row sees; inside it, a row sees its ancestors (a chain: every
    // earlier row) and itself.
    const at::Tensor node = at::arange(S, x.options()).view({1, 1, S}) - base.view({B, Tb, 1});  // [B, Tb, S]
    const at::Tensor inside = (node >= 0) & (node < W);
    const at::Tensor visible = (node < 0) | (at::gather(a, 2, node.clamp(0, W - 1)) & inside);
    s.mask = at::zeros({B, Tb, S}, at::TensorOptions().dtype(at::kFloat).device(device_))
                 .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity())
                 .view({B, 1, 1, Tb, S});
    st.out = run_layers(tokens, s, cache, opt);
  };
  std::string why;
  const bool captured_or_cpu = st.graph->run(step, &why);
  // The caller gets its own tensors: the step's are overwritten by the next replay.
  const auto rows = [&](const at::Tensor& t) { return t.defined() ? t.narrow(1, 0, T).clone() : t; };
  ForwardResult res{rows(st.out.logits), rows(st.out.hidden), rows(st.out.layer_hidden)};
  if (padding.defined()) zero_padding(res, padding);
  for (int64_t b = 0; b < B; ++b) cache.set_length(b, start_pos[b] + fed_count(opt, b, T));
  if (!captured_or_cpu) {
    // This call's outputs came from an eager run; later forwards take the eager path. (`st`
    // goes with steps_: nothing of it is used after this.)
    log::warn("llama aten engine: CUDA graph capture failed, running without graphs: ", why);
    static_steps_ = false;
    steps_.clear();
  }
  return res;
}

ForwardResult LlamaAtenModel::forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                                      KVCache& cache, const ForwardOptions& opt) {
  const std::string who = "llama aten forward";
  // Ids on the host are checked here; ids on the device there, unread (device_ids).
  check_forward_inputs(who, cfg_, cfg_.n_kv_heads, 0, tokens, start_pos, cache, opt.n_fed,
                       /*check_ids=*/tokens.defined() && tokens.is_cpu());
  check_forward_options(who, cfg_, tokens, start_pos, opt);
  for (int64_t l = 0; l < cache.n_layers(); ++l)
    for (const at::Tensor* t : {&cache.k(l), &cache.v(l)})
      SD_CHECK(t->scalar_type() == at::kFloat && t->device() == device_ && t->is_contiguous(), who,
               ": the KV cache must be contiguous float32 on ", device_.str(), " (make_cache), got ",
               at::toString(t->scalar_type()), " on ", t->device().str());
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (StaticStep* st = static_step(B, T, start_pos, cache, opt)) return forward_static(*st, tokens, start_pos, cache, opt);
  const Step s = make_step(B, T, start_pos, opt);
  const at::Tensor ids = device_ids(tokens, s.padding, device_, cfg_.n_vocab, who).reshape({-1});
  ForwardResult res = run_layers(ids, s, cache, opt);
  if (s.padding.defined()) zero_padding(res, s.padding);
  for (int64_t b = 0; b < B; ++b) cache.set_length(b, start_pos[b] + fed_count(opt, b, T));
  return res;
}

}  // namespace

std::shared_ptr<CausalLM> make_llama_aten(const ModelConfig& cfg, LlamaTensors tensors, at::ScalarType dtype,
                                          at::Device device, bool static_steps) {
  const std::string who = "llama aten engine";
  SD_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, who, ": weight dtype ", at::toString(dtype),
           " is not supported (float32 or bfloat16)");
  // GGUF blocks run only in the packed CPU engine's panel kernels.
  const auto native = [&](const QuantBlocks& q, const std::string& name) {
    SD_CHECK(!q.defined(), who, ": dtype native / native_q8 (GGUF blocks, tensor ", name, " = ", q.name,
             ") is not supported by this engine; use float32 or bfloat16");
  };
  native(tensors.native_tok_embd, "tok_embd");
  native(tensors.native_output, "output");
  for (size_t i = 0; i < tensors.layers.size(); ++i) {
    const auto& N = tensors.layers[i].native;
    const std::string p = "layers[" + std::to_string(i) + "].";
    const std::pair<const QuantBlocks*, const char*> blocks[] = {
        {&N.wq, "wq"}, {&N.wk, "wk"}, {&N.wv, "wv"}, {&N.wo, "wo"},
        {&N.w_gate, "w_gate"}, {&N.w_up, "w_up"}, {&N.w_down, "w_down"}};
    for (const auto& [q, name] : blocks) native(*q, p + name);
  }
  check_llama(cfg, tensors);
  check_device(device, who);
  return std::make_shared<LlamaAtenModel>(cfg, std::move(tensors), dtype, device, static_steps);
}

}  // namespace specdec::model
