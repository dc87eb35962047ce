// Llama-family forward pass (see llama.h). Attention is matmul + softmax (LibTorch 1.13 has
// no public scaled_dot_product_attention) over the preallocated KV cache.
#include "model/llama.h"
#include "model/checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
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

void check_tensors(const ModelConfig& c, const LlamaTensors& t) {
  const int64_t d = c.d_model, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  expect_shape(t.tok_embd, "tok_embd", {c.n_vocab, d});
  expect_shape(t.out_norm, "out_norm", {d});
  if (t.output.defined()) expect_shape(t.output, "output", {c.n_vocab, d});
  if (t.rope_freqs.defined()) expect_shape(t.rope_freqs, "rope_freqs", {c.head_dim / 2});
  SD_CHECK(static_cast<int64_t>(t.layers.size()) == c.n_layers, "llama: got ", t.layers.size(),
           " layers, config says n_layers = ", c.n_layers);
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const auto& L = t.layers[i];
    const std::string p = "layers[" + std::to_string(i) + "].";
    expect_shape(L.attn_norm, p + "attn_norm", {d});
    expect_shape(L.ffn_norm, p + "ffn_norm", {d});
    expect_shape(L.wq, p + "wq", {q_dim, d});
    expect_shape(L.wk, p + "wk", {kv_dim, d});
    expect_shape(L.wv, p + "wv", {kv_dim, d});
    expect_shape(L.wo, p + "wo", {d, q_dim});
    expect_shape(L.w_gate, p + "w_gate", {c.d_ff, d});
    expect_shape(L.w_up, p + "w_up", {c.d_ff, d});
    expect_shape(L.w_down, p + "w_down", {d, c.d_ff});
    if (c.qkv_bias) {
      expect_shape(L.bq, p + "bq", {q_dim});
      expect_shape(L.bk, p + "bk", {kv_dim});
      expect_shape(L.bv, p + "bv", {kv_dim});
    }
  }
}

// x: [N, d] -> [N, d]. HF LlamaRMSNorm order: x * rsqrt(mean(x^2) + eps), then * w.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor inv = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true).add_(eps));
  return (x * inv).mul_(w);
}

// x: [B, T, n_h, hd]; cos, sin: [B, T, 1, hd/2]. Rotates the two halves of each head
// (HF rotate_half): (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(3) / 2;
  at::Tensor x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
  at::Tensor out = at::empty(x.sizes(), x.options());
  at::Tensor o1 = out.narrow(3, 0, half), o2 = out.narrow(3, half, half);
  at::mul_out(o1, x1, cos);
  o1.sub_(x2 * sin);
  at::mul_out(o2, x2, cos);
  o2.add_(x1 * sin);
  return out;
}

struct Layer {
  at::Tensor attn_norm, ffn_norm;  // [d]
  Linear wq, wk, wv, wo, w_gate, w_up, w_down;
};

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const ModelConfig& cfg, LlamaTensors t, at::ScalarType dtype) : cfg_(cfg) {
    tok_embd_ = t.tok_embd.to(at::kFloat).contiguous();
    for (auto& L : t.layers) {
      Layer y;
      y.attn_norm = L.attn_norm.to(at::kFloat).contiguous();
      y.ffn_norm = L.ffn_norm.to(at::kFloat).contiguous();
      y.wq = Linear(L.wq.to(at::kFloat), cfg.qkv_bias ? L.bq : at::Tensor(), dtype);
      y.wk = Linear(L.wk.to(at::kFloat), cfg.qkv_bias ? L.bk : at::Tensor(), dtype);
      y.wv = Linear(L.wv.to(at::kFloat), cfg.qkv_bias ? L.bv : at::Tensor(), dtype);
      y.wo = Linear(L.wo.to(at::kFloat), at::Tensor(), dtype);
      y.w_gate = Linear(L.w_gate.to(at::kFloat), at::Tensor(), dtype);
      y.w_up = Linear(L.w_up.to(at::kFloat), at::Tensor(), dtype);
      y.w_down = Linear(L.w_down.to(at::kFloat), at::Tensor(), dtype);
      L = LlamaLayerTensors();  // release the fp32 copies as we go (bf16 halves peak memory)
      layers_.push_back(std::move(y));
    }
    out_norm_ = t.out_norm.to(at::kFloat).contiguous();
    cfg_.tie_embeddings = !t.output.defined();
    output_ = Linear(cfg_.tie_embeddings ? tok_embd_ : t.output.to(at::kFloat), at::Tensor(),
                     dtype);
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
      for (const Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
        n += l->weight_bytes();
      n += (L.attn_norm.numel() + L.ffn_norm.numel()) * 4;
    }
    return n + cfg_.d_model * 4;  // plus one embedding row per token
  }

  at::Tensor forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                     KVCache& cache) override;

 private:
  void ensure_rope_table(int64_t n_pos);
  at::Tensor attention(const Layer& L, int64_t layer, const at::Tensor& x, KVCache& cache);

  ModelConfig cfg_;
  at::Tensor tok_embd_;  // [V, d]
  std::vector<Layer> layers_;
  at::Tensor out_norm_;  // [d]
  Linear output_;        // [V, d]
  at::Tensor inv_freq_;  // [hd/2]
  at::Tensor cos_, sin_;  // [n_pos, hd/2] tables, grown on demand

  // Per-forward context shared by all layers.
  struct Step {
    int64_t B = 0, T = 0, L = 0;      // batch, new tokens, attended positions
    std::vector<int64_t> start;
    at::Tensor cos, sin;              // [B, T, 1, hd/2]
    at::Tensor mask;                  // [B, 1, 1, T, L] bool (true = masked) or undefined
  } step_;
};

void LlamaModel::ensure_rope_table(int64_t n_pos) {
  if (cos_.defined() && cos_.size(0) >= n_pos) return;
  const int64_t n = std::max<int64_t>(n_pos, cos_.defined() ? 2 * cos_.size(0) : 256);
  // fp32 products position * inv_freq, as HF computes them, so angles agree bit for bit.
  at::Tensor ang = at::outer(at::arange(n, at::kFloat), inv_freq_);  // [n, hd/2]
  cos_ = ang.cos();
  sin_ = ang.sin();
}

}  // namespace

namespace {

at::Tensor LlamaModel::attention(const Layer& w, int64_t layer, const at::Tensor& xn,
                                 KVCache& cache) {
  const Step& s = step_;
  const int64_t B = s.B, T = s.T, L = s.L, H = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  const int64_t hd = cfg_.head_dim, G = H / Hkv;
  at::Tensor q = apply_rope(w.wq(xn).view({B, T, H, hd}), s.cos, s.sin);    // [B, T, H, hd]
  at::Tensor k = apply_rope(w.wk(xn).view({B, T, Hkv, hd}), s.cos, s.sin);  // [B, T, Hkv, hd]
  at::Tensor v = w.wv(xn).view({B, T, Hkv, hd});                             // [B, T, Hkv, hd]
  at::Tensor& kc = cache.k(layer);  // [B, Hkv, S, hd]
  at::Tensor& vc = cache.v(layer);  // [B, Hkv, S, hd]
  for (int64_t b = 0; b < B; ++b) {
    kc.select(0, b).narrow(1, s.start[b], T).copy_(k.select(0, b).transpose(0, 1));
    vc.select(0, b).narrow(1, s.start[b], T).copy_(v.select(0, b).transpose(0, 1));
  }
  at::Tensor keys = kc.narrow(2, 0, L);  // [B, Hkv, L, hd]
  at::Tensor vals = vc.narrow(2, 0, L);  // [B, Hkv, L, hd]
  // GQA without repeating K/V: query head h uses kv head h / G (HF repeat_kv order), so the
  // G query heads of one kv head are stacked as G*T rows against the same keys.
  at::Tensor qg = q.mul_(1.0 / std::sqrt(static_cast<double>(hd)))
                      .permute({0, 2, 1, 3})
                      .reshape({B, Hkv, G * T, hd});
  at::Tensor scores = at::matmul(qg, keys.transpose(2, 3));  // [B, Hkv, G*T, L]
  if (s.mask.defined())
    scores.view({B, Hkv, G, T, L}).masked_fill_(s.mask, -std::numeric_limits<float>::infinity());
  at::Tensor out = at::matmul(at::softmax(scores, -1), vals);  // [B, Hkv, G*T, hd]
  out = out.view({B, H, T, hd}).permute({0, 2, 1, 3}).reshape({B * T, H * hd}).contiguous();
  return w.wo(out);  // [B*T, d]
}

at::Tensor LlamaModel::forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                               KVCache& cache) {
  check_forward_inputs("llama forward", cfg_, cfg_.n_kv_heads, 0, tokens, start_pos, cache);
  Step& s = step_;
  s.B = tokens.size(0);
  s.T = tokens.size(1);
  s.start = start_pos;
  s.L = 0;
  bool ragged = false;
  for (int64_t b = 0; b < s.B; ++b) {
    ragged = ragged || start_pos[b] != start_pos[0];
    s.L = std::max(s.L, start_pos[b] + s.T);
  }
  const int64_t half = cfg_.head_dim / 2;
  ensure_rope_table(s.L);
  if (!ragged) {  // every sequence at the same positions: a view into the table
    s.cos = cos_.narrow(0, start_pos[0], s.T).view({1, s.T, 1, half});
    s.sin = sin_.narrow(0, start_pos[0], s.T).view({1, s.T, 1, half});
  } else {
    at::Tensor pos = at::tensor(at::IntArrayRef(start_pos), at::kLong).view({s.B, 1}) +
                     at::arange(s.T, at::kLong).view({1, s.T});  // [B, T]
    s.cos = cos_.index_select(0, pos.view(-1)).view({s.B, s.T, 1, half});
    s.sin = sin_.index_select(0, pos.view(-1)).view({s.B, s.T, 1, half});
  }
  s.mask = at::Tensor();
  if (s.T > 1 || ragged) {  // key j is hidden from the query at position p when j > p
    at::Tensor pos_q = at::tensor(at::IntArrayRef(start_pos), at::kLong).view({s.B, 1}) +
                       at::arange(s.T, at::kLong).view({1, s.T});  // [B, T]
    s.mask = at::arange(s.L, at::kLong).view({1, 1, s.L}).gt(pos_q.view({s.B, s.T, 1}))
                 .view({s.B, 1, 1, s.T, s.L});
  }
  at::Tensor x = at::embedding(tok_embd_, tokens.to(at::kLong).reshape({-1}));  // [B*T, d]
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const Layer& w = layers_[l];
    x.add_(attention(w, l, rms_norm(x, w.attn_norm, cfg_.norm_eps), cache));
    at::Tensor xn = rms_norm(x, w.ffn_norm, cfg_.norm_eps);  // [B*T, d]
    at::Tensor g = w.w_gate(xn);                             // [B*T, d_ff]
    at::silu_(g).mul_(w.w_up(xn));
    x.add_(w.w_down(g));
  }
  at::Tensor logits = output_(rms_norm(x, out_norm_, cfg_.norm_eps));  // [B*T, V]
  for (int64_t b = 0; b < s.B; ++b) cache.set_length(b, start_pos[b] + s.T);
  return logits.view({s.B, s.T, cfg_.n_vocab});
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

std::shared_ptr<CausalLM> make_llama(const ModelConfig& cfg, LlamaTensors tensors,
                                     at::ScalarType dtype) {
  check_config(cfg);
  check_tensors(cfg, tensors);
  rope_inv_freq(cfg);  // validates the scaling before any weight is converted
  return std::make_shared<LlamaModel>(cfg, std::move(tensors), dtype);
}

}  // namespace specdec::model
