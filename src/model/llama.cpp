// Llama-family forward pass (see llama.h): fused q/k/v and gate/up projections (Linear), and
// hand-written per-row RMSNorm, RoPE, KV-cache writes and attention over the preallocated
// cache.
#include "model/llama.h"
#include "model/checks.h"
#include "model/config_limits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "model/linear.h"

namespace specdec::model {

namespace {

// Checks an fp32-convertible tensor against its expected shape, naming it on failure.
void expect_shape(const at::Tensor& t, const std::string& name, std::vector<int64_t> shape) {
  SD_CHECK(t.defined(), "llama: tensor ", name, " is missing, expected shape ",
           shape_str(shape));
  SD_CHECK(t.sizes() == at::IntArrayRef(shape), "llama: tensor ", name, ": shape ",
           shape_str(t.sizes()), ", expected ", shape_str(shape));
}

void check_config(const ModelConfig& c) {
  // Ranges (limits in config_limits.h), finite positive norm_eps / rope_theta: a NaN or
  // negative epsilon would load and then generate junk.
  check_config_limits(c, "llama config");
  SD_CHECK(c.n_vocab > 0 && c.d_model > 0 && c.n_layers > 0 && c.n_heads > 0 &&
               c.n_kv_heads > 0 && c.head_dim > 0 && c.d_ff > 0,
           "llama: config has a non-positive size (n_vocab=", c.n_vocab, " d_model=", c.d_model,
           " n_layers=", c.n_layers, " n_heads=", c.n_heads, " n_kv_heads=", c.n_kv_heads,
           " head_dim=", c.head_dim, " d_ff=", c.d_ff, ")");
  SD_CHECK(c.n_heads % c.n_kv_heads == 0, "llama: n_heads ", c.n_heads,
           " is not a multiple of n_kv_heads ", c.n_kv_heads);
  SD_CHECK(c.head_dim % 2 == 0, "llama: head_dim ", c.head_dim, " must be even for RoPE");
  SD_CHECK(c.rope_theta > 0, "llama: rope_theta must be positive, got ", c.rope_theta);
}

// A weight given either as fp32 values or (dtype native) as GGUF blocks.
void expect_weight(const at::Tensor& t, const QuantBlocks& q, const std::string& name,
                   std::vector<int64_t> shape) {
  if (!q.defined()) return expect_shape(t, name, shape);
  SD_CHECK(q.out == shape[0] && q.in == shape[1], "llama: ", name, " (", q.name, "): shape [",
           q.out, ", ", q.in, "], expected ", shape_str(shape));
}

void check_tensors(const ModelConfig& c, const LlamaTensors& t) {
  const int64_t d = c.d_model, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  expect_weight(t.tok_embd, t.native_tok_embd, "tok_embd", {c.n_vocab, d});
  expect_shape(t.out_norm, "out_norm", {d});
  if (t.output.defined() || t.native_output.defined())
    expect_weight(t.output, t.native_output, "output", {c.n_vocab, d});
  if (t.rope_freqs.defined()) expect_shape(t.rope_freqs, "rope_freqs", {c.head_dim / 2});
  SD_CHECK(static_cast<int64_t>(t.layers.size()) == c.n_layers, "llama: got ", t.layers.size(),
           " layers, config says n_layers = ", c.n_layers);
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const auto& L = t.layers[i];
    const auto& N = L.native;
    const std::string p = "layers[" + std::to_string(i) + "].";
    expect_shape(L.attn_norm, p + "attn_norm", {d});
    expect_shape(L.ffn_norm, p + "ffn_norm", {d});
    expect_weight(L.wq, N.wq, p + "wq", {q_dim, d});
    expect_weight(L.wk, N.wk, p + "wk", {kv_dim, d});
    expect_weight(L.wv, N.wv, p + "wv", {kv_dim, d});
    expect_weight(L.wo, N.wo, p + "wo", {d, q_dim});
    expect_weight(L.w_gate, N.w_gate, p + "w_gate", {c.d_ff, d});
    expect_weight(L.w_up, N.w_up, p + "w_up", {c.d_ff, d});
    expect_weight(L.w_down, N.w_down, p + "w_down", {d, c.d_ff});
    if (c.qkv_bias) {
      expect_shape(L.bq, p + "bq", {q_dim});
      expect_shape(L.bk, p + "bk", {kv_dim});
      expect_shape(L.bv, p + "bv", {kv_dim});
    }
  }
}

// Every op below works row by row: a row's result does not depend on how many rows are in
// the batch, so a verification forward of T tokens gives bit-identical rows to T decode
// steps (given the same Linear kernel, see linear.h). That keeps greedy speculative decoding
// token-exact without relying on luck in the rounding. The loops are plain C++ over raw
// pointers: at 1-8 rows LibTorch's per-op overhead, not arithmetic, was the cost.
//
// Hot loops are compiled twice (AVX-512 and baseline x86-64) and picked at load time (once,
// baseline only, with -DSPECDEC_PORTABLE=ON).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SPECDEC_PORTABLE)
#define SD_VECTOR_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define SD_VECTOR_CLONES
#endif

// x: [N, d] -> [N, d]. HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then * w (fp32).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const int64_t n = x.size(0), d = x.size(1);
  at::Tensor y = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = xp + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + static_cast<float>(eps));
    for (int64_t i = 0; i < d; ++i) yp[r * d + i] = wp[i] * (xr[i] * inv);
  }
  return y;
}

// In place on one row of n_heads heads of hd values at one position: HF rotate_half,
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) on the two halves of each head.
void rope_row(float* x, int64_t n_heads, int64_t hd, const float* cos, const float* sin) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* x1 = x + h * hd;
    float* x2 = x1 + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cos[i] - b * sin[i];
      x2[i] = b * cos[i] + a * sin[i];
    }
  }
}

// e^x for the softmax, where x <= 0. Written without calls or branches so that the loop
// around it vectorises: e^x = 2^n 2^f with n = round(x log2 e), f in [-1/2, 1/2], and 2^f
// from Cephes' degree-6 minimax polynomial for exp2f (relative error ~2e-7, about 2 ulp).
// Below -87 the result stops at 2^-126 instead of going subnormal or to 0: a weight of
// ~1e-38 next to the maximum's 1 changes nothing.
inline float softmax_exp(float x) {
  x = std::max(x, -87.0f);
  const float t = x * 1.44269504088896341f;  // log2(e)
  const float n = std::nearbyint(t);
  const float f = t - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Softmax attention of one query head over the cached slots listed in `slots` (ascending: a
// chain row lists 0..its own slot, a tree row the prefix and then its ancestors):
// out = sum_j softmax_j(scale * q.k_j) v_j. keys, vals: [S, hd] rows of the cache; scores:
// scratch of n_keys floats. The result depends only on q and the attended keys/values in
// their order, never on the other queries of the forward. Every key is reached through the
// slot list, also for a chain: with a contiguous range the compiler vectorises across keys
// and rounds the dot products differently, and a tree row would then no longer equal the
// same path fed as a chain bit for bit.
SD_VECTOR_CLONES void attend(const float* q, const float* keys, const float* vals, const int64_t* slots,
                             int64_t n_keys, int64_t hd, float scale, float* scores, float* out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* k = keys + slots[j] * hd;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < hd; ++i) s += q[i] * k[i];
    scores[j] = s * scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n_keys; ++j) {
    const float e = softmax_exp(scores[j] - mx);
    scores[j] = e;
    sum += e;
  }
  for (int64_t i = 0; i < hd; ++i) out[i] = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float p = scores[j];
    const float* v = vals + slots[j] * hd;
#pragma omp simd
    for (int64_t i = 0; i < hd; ++i) out[i] += p * v[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < hd; ++i) out[i] *= inv;
}

struct Layer {
  at::Tensor attn_norm, ffn_norm;  // [d]
  Linear wqkv;                     // q, k and v stacked: [q_dim + 2 kv_dim, d]
  Linear wo;
  Linear w_gate_up;                // gate and up stacked: [2 d_ff, d]
  Linear w_down;
};

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const ModelConfig& cfg, LlamaTensors t, at::ScalarType dtype) : cfg_(cfg) {
    const bool native = t.native_tok_embd.defined();
    const bool q8 = t.native_int8_dot;
    for (auto& L : t.layers) {
      Layer y;
      y.attn_norm = L.attn_norm.to(at::kFloat).contiguous();
      y.ffn_norm = L.ffn_norm.to(at::kFloat).contiguous();
      // Stacked projections read the same input: one kernel call instead of three (two).
      // Each output feature is still its own dot product, so the numbers do not change.
      at::Tensor bqkv = cfg.qkv_bias ? at::cat({L.bq, L.bk, L.bv}).to(at::kFloat) : at::Tensor();
      if (native) {
        const auto& N = L.native;
        y.wqkv = Linear(PanelWeight::from_blocks({N.wq, N.wk, N.wv}, q8), bqkv);
        y.wo = Linear(PanelWeight::from_blocks({N.wo}, q8), at::Tensor());
        y.w_gate_up = Linear(PanelWeight::from_blocks({N.w_gate, N.w_up}, q8), at::Tensor());
        y.w_down = Linear(PanelWeight::from_blocks({N.w_down}, q8), at::Tensor());
      } else {
        y.wqkv = Linear(at::cat({L.wq, L.wk, L.wv}).to(at::kFloat), bqkv, dtype);
        y.wo = Linear(L.wo.to(at::kFloat), at::Tensor(), dtype);
        y.w_gate_up = Linear(at::cat({L.w_gate, L.w_up}).to(at::kFloat), at::Tensor(), dtype);
        y.w_down = Linear(L.w_down.to(at::kFloat), at::Tensor(), dtype);
      }
      L = LlamaLayerTensors();  // release the fp32 copies as we go (bf16 halves peak memory)
      layers_.push_back(std::move(y));
    }
    out_norm_ = t.out_norm.to(at::kFloat).contiguous();
    if (native) {
      // Tied: the embedding rows are the head's (decoded on lookup); otherwise the embedding
      // keeps its own blocks, packed but only ever read row by row.
      cfg_.tie_embeddings = !t.native_output.defined();
      output_ = Linear(PanelWeight::from_blocks({cfg_.tie_embeddings ? t.native_tok_embd : t.native_output}, q8),
                       at::Tensor());
      if (!cfg_.tie_embeddings) embd_rows_ = PanelWeight::from_blocks({t.native_tok_embd});
    } else {
      tok_embd_ = t.tok_embd.to(at::kFloat).contiguous();
      cfg_.tie_embeddings = !t.output.defined();
      output_ = Linear(cfg_.tie_embeddings ? tok_embd_ : t.output.to(at::kFloat), at::Tensor(),
                       dtype);
      // Tied fp32 weights: the embedding rows come from the LM head (one copy in memory). With
      // bf16 linear weights the embedding keeps its own fp32 table.
      if (cfg_.tie_embeddings && dtype == at::kFloat) tok_embd_ = at::Tensor();
    }
    inv_freq_ = rope_inv_freq(cfg_);
    if (t.rope_freqs.defined()) inv_freq_ = inv_freq_ / t.rope_freqs.to(at::kFloat);
  }

  const ModelConfig& config() const override { return cfg_; }

  KVCache make_cache(int64_t batch, int64_t max_seq) const override {
    return KVCache(cfg_.n_layers, batch, cfg_.n_kv_heads, max_seq, cfg_.head_dim);
  }

  int64_t weight_bytes() const override {
    int64_t n = output_.weight_bytes() + out_norm_.numel() * 4;
    for (const auto& L : layers_) {
      for (const Linear* l : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down}) n += l->weight_bytes();
      n += (L.attn_norm.numel() + L.ffn_norm.numel()) * 4;
    }
    return n + cfg_.d_model * 4;  // plus one embedding row per token
  }

  int64_t resident_weight_bytes() const override {
    const int64_t table = tok_embd_.defined() ? tok_embd_.numel() * 4 : embd_rows_.defined() ? embd_rows_.bytes() : 0;
    return weight_bytes() - cfg_.d_model * 4 + table;
  }
  bool ragged_batches() const override { return true; }

  at::Tensor embed(const at::Tensor& ids_in) const override {
    const at::Tensor ids = ids_in.to(at::kLong).reshape({-1});
    return tok_embd_.defined()    ? at::embedding(tok_embd_, ids)
           : embd_rows_.defined() ? embd_rows_.rows(ids)
                                  : output_.rows(ids);
  }
  at::Tensor head_rows(const at::Tensor& ids) const override { return output_.rows(ids.to(at::kLong).reshape({-1})); }
  at::Tensor output_head(const at::Tensor& hidden) const override {
    return output_(hidden.to(at::kFloat).contiguous());
  }

  using CausalLM::forward;
  ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                        KVCache& cache, const ForwardOptions& options) override;

 private:
  void ensure_rope_table(int64_t n_pos);
  at::Tensor attention(const Layer& L, int64_t layer, const at::Tensor& x, KVCache& cache);

  ModelConfig cfg_;
  at::Tensor tok_embd_;  // [V, d], or undefined: tied fp32 embeddings are output_'s rows
  PanelWeight embd_rows_;  // dtype native, untied: the embedding's blocks (else empty)
  std::vector<Layer> layers_;
  at::Tensor out_norm_;  // [d]
  Linear output_;        // [V, d]
  at::Tensor inv_freq_;  // [hd/2]
  at::Tensor cos_, sin_;  // [n_pos, hd/2] tables, grown on demand

  // Per-forward context shared by all layers.
  struct Step {
    int64_t B = 0, T = 0;
    std::vector<int64_t> start;
    // Ragged batches: sequence b feeds n_fed[b] <= T tokens, and fed token (b, t) is row
    // row0[b] + t of the packed activations [N, d], N = row0[B] (B*T when nothing is ragged).
    std::vector<int64_t> n_fed, row0;
    std::vector<int64_t> pos;  // [B*T] position of each fed token (RoPE angle)
    // Trees only: tree node t (fed token t - tree_cached) of sequence b attends to the prefix
    // [0, start - tree_cached) and to the nodes anc[i][anc_begin[i][t] .. anc_begin[i][t+1]) (its
    // ancestors, root first, itself last) at slots start - tree_cached + node, where i = b for a
    // tree per sequence and 0 for one tree. Empty for a chain.
    std::vector<std::vector<int64_t>> anc, anc_begin;
    int64_t tree_cached = 0;
    std::vector<int64_t> all_slots;  // 0, 1, ..., max_b start[b] + T - 1: filled once per forward
  } step_;
};

void LlamaModel::ensure_rope_table(int64_t n_pos) {
  if (cos_.defined() && cos_.size(0) >= n_pos) return;
  const int64_t n = std::max<int64_t>(n_pos, cos_.defined() ? 2 * cos_.size(0) : 256);
  // fp32 products position * inv_freq, as HF computes them, so angles agree bit for bit.
  at::Tensor ang = at::outer(at::arange(n, at::kFloat), inv_freq_);  // [n, hd/2]
  cos_ = ang.cos().contiguous();
  sin_ = ang.sin().contiguous();
}

}  // namespace

namespace {

// xn: [N, d] -> [N, d], the fed rows only (Step::row0). Row (b, t) sits at position
// pos[b*T + t], is cached at slot start[b] + t and attends to the cached slots [0, start[b] + t]
// of sequence b (causal; start positions and fed counts may differ between sequences).
at::Tensor LlamaModel::attention(const Layer& w, int64_t layer, const at::Tensor& xn,
                                 KVCache& cache) {
  const Step& s = step_;
  const int64_t B = s.B, T = s.T, H = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  const int64_t hd = cfg_.head_dim, half = hd / 2, G = H / Hkv;
  const int64_t q_dim = H * hd, kv_dim = Hkv * hd, row = q_dim + 2 * kv_dim;
  at::Tensor qkv = w.wqkv(xn);  // [N, q_dim + 2 kv_dim]
  float* qkvp = qkv.data_ptr<float>();
  float* kc = cache.k(layer).data_ptr<float>();  // [B, Hkv, S, hd]
  float* vc = cache.v(layer).data_ptr<float>();
  const int64_t S = cache.max_seq();
  const float* cosp = cos_.data_ptr<float>();
  const float* sinp = sin_.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < s.n_fed[b]; ++t) {
      const int64_t pos = s.pos[b * T + t], slot = s.start[b] + t;
      float* r = qkvp + (s.row0[b] + t) * row;
      rope_row(r, H + Hkv, hd, cosp + pos * half, sinp + pos * half);  // q and k heads
      for (int64_t h = 0; h < Hkv; ++h) {
        const int64_t at_slot = ((b * Hkv + h) * S + slot) * hd;
        std::copy_n(r + q_dim + h * hd, hd, kc + at_slot);
        std::copy_n(r + q_dim + kv_dim + h * hd, hd, vc + at_slot);
      }
    }
  }
  at::Tensor out = at::empty({s.row0[B], q_dim}, xn.options());
  float* outp = out.data_ptr<float>();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const bool tree = !s.anc_begin.empty();
  const bool tree_per_sequence = s.anc_begin.size() > 1;
  const int64_t work = T * (s.start[0] + T) * hd;  // per (b, h) task, roughly
  parallel::parallel_for(B * H, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work)),
                         [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<int64_t> slots;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / H, h = i % H;
      const int64_t base = ((b * Hkv + h / G) * S) * hd;  // kv head h / G (HF repeat_kv)
      scores.resize(s.start[b] + T);
      // A chain row t attends to slots 0 .. start + t: a prefix of s.all_slots. A tree row
      // attends to the slots before the tree and then to its ancestors.
      const int64_t tree_base = s.start[b] - s.tree_cached;
      if (tree) slots.assign(s.all_slots.begin(), s.all_slots.begin() + tree_base);
      for (int64_t t = 0; t < s.n_fed[b]; ++t) {
        const float* q = qkvp + (s.row0[b] + t) * row + h * hd;
        float* o = outp + (s.row0[b] + t) * q_dim + h * hd;
        const int64_t* row_slots = s.all_slots.data();
        int64_t n_keys = s.start[b] + t + 1;
        if (tree) {
          const int64_t node = s.tree_cached + t;
          slots.resize(tree_base);
          const std::vector<int64_t>& anc = s.anc[tree_per_sequence ? b : 0];
          const std::vector<int64_t>& begin = s.anc_begin[tree_per_sequence ? b : 0];
          for (int64_t a = begin[node]; a < begin[node + 1]; ++a) slots.push_back(tree_base + anc[a]);
          row_slots = slots.data();
          n_keys = static_cast<int64_t>(slots.size());
        }
        // One call site for both (two let the compiler specialise one and round it differently).
        attend(q, kc + base, vc + base, row_slots, n_keys, hd, scale, scores.data(), o);
      }
    }
  });
  return w.wo(out);  // [N, d]
}

ForwardResult LlamaModel::forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                                  KVCache& cache, const ForwardOptions& options) {
  ForwardOptions copy;  // a tree grown on a device comes to the host here
  const ForwardOptions& opt = read_device_parents(options, copy);
  check_forward_inputs("llama forward", cfg_, cfg_.n_kv_heads, 0, tokens, start_pos, cache, opt.n_fed);
  check_forward_options("llama forward", cfg_, tokens, start_pos, opt);
  SD_CHECK(cache.k(0).scalar_type() == at::kFloat && cache.k(0).is_contiguous(),
           "llama forward: the KV cache must be contiguous float32");
  Step& s = step_;
  s.B = tokens.size(0);
  s.T = tokens.size(1);
  s.start = start_pos;
  s.n_fed = opt.n_fed.empty() ? std::vector<int64_t>(s.B, s.T) : opt.n_fed;
  s.row0.assign(s.B + 1, 0);
  for (int64_t b = 0; b < s.B; ++b) s.row0[b + 1] = s.row0[b] + s.n_fed[b];
  const int64_t N = s.row0[s.B];
  // Pool or this thread alone, by this model's measured times for forwards of about N rows
  // (exact up to 16, then by power of two): see parallel::Step.
  const parallel::Step mode(this, N <= 16 ? N : 16 + static_cast<int64_t>(std::log2(static_cast<double>(N))));
  s.pos = fed_positions(start_pos, s.T, opt);
  const int64_t n_trees = opt.parents.empty() ? 0
                          : static_cast<int64_t>(opt.parents.size()) == opt.tree_cached + s.T ? 1 : s.B;
  s.anc.resize(n_trees);
  s.anc_begin.resize(n_trees);
  for (int64_t i = 0; i < n_trees; ++i)
    tree_ancestors(tree_of(opt, i, s.T), opt.tree_cached + s.T, s.anc[i], s.anc_begin[i]);
  s.tree_cached = opt.tree_cached;
  s.all_slots.resize(*std::max_element(start_pos.begin(), start_pos.end()) + s.T);
  std::iota(s.all_slots.begin(), s.all_slots.end(), int64_t{0});
  ensure_rope_table(*std::max_element(s.pos.begin(), s.pos.end()) + 1);
  const int64_t ff = cfg_.d_ff;
  at::Tensor ids = tokens.to(at::kLong).reshape({-1});  // [B*T]
  // Ragged: the packed row of (b, t) is its index among the fed rows; padding is never read.
  at::Tensor fed_rows;  // [N] index b*T + t of each packed row, or undefined when N = B*T
  if (N < s.B * s.T) {
    fed_rows = at::empty({N}, at::kLong);
    int64_t* fr = fed_rows.data_ptr<int64_t>();
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.n_fed[b]; ++t) fr[s.row0[b] + t] = b * s.T + t;
    ids = ids.index_select(0, fed_rows);
  }
  ForwardResult res;
  // [N, c] -> [B, T, c]: the rows of unfed tokens are zero.
  const auto shape = [&](const at::Tensor& t) {
    if (!fed_rows.defined()) return t.view({s.B, s.T, t.size(1)});
    return at::zeros({s.B * s.T, t.size(1)}, t.options()).index_copy_(0, fed_rows, t).view({s.B, s.T, t.size(1)});
  };
  if (N == 0) {  // nothing fed: nothing to compute or cache
    const auto zeros = [&](int64_t c) { return at::zeros({s.B, s.T, c}, at::kFloat); };
    if (opt.hidden_layer >= 0) res.layer_hidden = zeros(cfg_.d_model);
    if (opt.final_hidden) res.hidden = zeros(cfg_.d_model);
    if (opt.logits) res.logits = zeros(cfg_.n_vocab);
    for (int64_t b = 0; b < s.B; ++b) cache.set_length(b, start_pos[b]);
    return res;
  }
  at::Tensor x = embed(ids);  // [N, d]
  size_t next_listed = 0;  // opt.layers is ascending: walk it alongside l
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const bool run = opt.layers.empty() || (next_listed < opt.layers.size() && opt.layers[next_listed] == l);
    if (run) {
      if (!opt.layers.empty()) ++next_listed;
      const Layer& w = layers_[l];
      x.add_(attention(w, l, rms_norm(x, w.attn_norm, cfg_.norm_eps), cache));
      at::Tensor gu = w.w_gate_up(rms_norm(x, w.ffn_norm, cfg_.norm_eps));  // [N, 2 d_ff]
      at::Tensor g = at::silu(gu.narrow(1, 0, ff)).mul_(gu.narrow(1, ff, ff));
      x.add_(w.w_down(g));
    }
    if (l == opt.hidden_layer) res.layer_hidden = shape(x.clone());
  }
  const at::Tensor xn = rms_norm(x, out_norm_, cfg_.norm_eps);  // [N, d]
  if (opt.final_hidden) res.hidden = shape(xn);
  if (opt.logits && opt.logits_last > 0) {  // the output head over the rows asked for: [B, k, V]
    const int64_t k = opt.logits_last;
    std::vector<int64_t> rows, slots;  // packed rows of xn, and their rows of the result
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = std::max<int64_t>(0, s.n_fed[b] - k); t < s.n_fed[b]; ++t) {
        rows.push_back(s.row0[b] + t);
        slots.push_back(b * k + t - std::max<int64_t>(0, s.n_fed[b] - k));
      }
    // A decode step or a verification (every fed row read) takes xn as it is: no gather.
    const bool all = static_cast<int64_t>(rows.size()) == N;
    const at::Tensor head = output_(all ? xn : xn.index_select(0, at::tensor(rows, at::kLong)));  // [M, V]
    const bool dense = static_cast<int64_t>(slots.size()) == s.B * k;  // every sequence fed >= k
    res.logits = (dense ? head : at::zeros({s.B * k, head.size(1)}, head.options())
                                     .index_copy_(0, at::tensor(slots, at::kLong), head))
                     .view({s.B, k, head.size(1)});
  } else if (opt.logits) {
    res.logits = shape(output_(xn));  // [B, T, V]
  }
  for (int64_t b = 0; b < s.B; ++b) cache.set_length(b, start_pos[b] + s.n_fed[b]);
  return res;
}

}  // namespace

at::Tensor rope_inv_freq(const ModelConfig& cfg) {
  const int64_t hd = cfg.head_dim;
  // As HF: 1 / theta^(2i/hd) computed in fp32.
  at::Tensor expo = at::arange(0, hd, 2, at::kLong).to(at::kFloat) / static_cast<double>(hd);
  at::Tensor inv = at::reciprocal(at::pow(at::Scalar(cfg.rope_theta), expo));  // [hd/2]
  const std::string& type = cfg.rope_scaling_type;
  const double f = cfg.rope_scaling_factor;
  if (type.empty() || type == "none" || type == "default") return inv;
  SD_CHECK(f > 0, "llama: rope scaling factor must be positive, got ", f);
  if (type == "linear") return inv / f;
  SD_CHECK(type == "llama3", "llama: unsupported rope scaling type '", type,
           "' (supported: none, linear, llama3)");
  // Llama 3.1: keep high frequencies, divide low ones by f, interpolate in between.
  const double lo = cfg.rope_low_freq_factor, hi = cfg.rope_high_freq_factor;
  const double orig = static_cast<double>(cfg.rope_orig_ctx);
  SD_CHECK(hi > lo, "llama: llama3 rope scaling needs high_freq_factor > low_freq_factor, got ",
           hi, " and ", lo);
  at::Tensor out = inv.clone();
  float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double wavelen = 2 * M_PI / p[i];
    if (wavelen > orig / lo) {
      p[i] = static_cast<float>(p[i] / f);
    } else if (wavelen >= orig / hi) {
      const double smooth = (orig / wavelen - lo) / (hi - lo);
      p[i] = static_cast<float>((1 - smooth) * p[i] / f + smooth * p[i]);
    }
  }
  return out;
}

void check_llama(const ModelConfig& cfg, const LlamaTensors& tensors) {
  check_config(cfg);
  check_tensors(cfg, tensors);
  rope_inv_freq(cfg);  // validates the scaling before any weight is converted
}

std::shared_ptr<CausalLM> make_llama(const ModelConfig& cfg, LlamaTensors tensors,
                                     at::ScalarType dtype) {
  check_llama(cfg, tensors);
  return std::make_shared<LlamaModel>(cfg, std::move(tensors), dtype);
}

}  // namespace specdec::model
