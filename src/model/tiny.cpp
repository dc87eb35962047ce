// Tiny random Llama models (see tiny.h).
#include "model/tiny.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace specdec::model {

namespace {

// N(mean, std^2) entries from our own generator (Box-Muller), so the weights are the same
// on every platform and LibTorch version, unlike at::randn.
at::Tensor randn(Rng& rng, at::IntArrayRef shape, double std, double mean = 0.0) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();  // u1 in (0, 1]
    const double r = std::sqrt(-2.0 * std::log(u1));
    p[i] = static_cast<float>(mean + std * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) p[i + 1] = static_cast<float>(mean + std * r * std::sin(2 * M_PI * u2));
  }
  return t;
}

// Mean over rows of max softmax(scale * logits). logits: [N, V].
double mean_max_prob(const at::Tensor& logits, double scale) {
  return at::softmax(logits * scale, -1).amax(-1).mean().item<double>();
}

}  // namespace

ModelConfig tiny_llama_config() {
  ModelConfig c;
  c.arch = "llama";
  c.n_vocab = 32;
  c.n_ctx = 256;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.d_ff = 64;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  return c;
}

LlamaTensors make_tiny_llama_tensors(const ModelConfig& c, uint64_t seed) {
  SD_CHECK(c.n_vocab > 0 && c.d_model > 0 && c.n_layers > 0 && c.n_heads > 0 &&
               c.n_kv_heads > 0 && c.head_dim > 0 && c.d_ff > 0,
           "make_tiny_llama_tensors: config sizes must be positive");
  Rng rng(seed);
  const int64_t d = c.d_model, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  const double sd = 1.0 / std::sqrt(static_cast<double>(d));
  LlamaTensors t;
  t.tok_embd = randn(rng, {c.n_vocab, d}, 1.0);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LlamaLayerTensors L;
    // Norm gains around 1 (not exactly 1) so a wrong norm-weight order shows in tests.
    L.attn_norm = randn(rng, {d}, 0.1, 1.0);
    L.wq = randn(rng, {q_dim, d}, sd);
    L.wk = randn(rng, {kv_dim, d}, sd);
    L.wv = randn(rng, {kv_dim, d}, sd);
    L.wo = randn(rng, {d, q_dim}, 1.0 / std::sqrt(static_cast<double>(q_dim)));
    if (c.qkv_bias) {
      L.bq = randn(rng, {q_dim}, 0.1);
      L.bk = randn(rng, {kv_dim}, 0.1);
      L.bv = randn(rng, {kv_dim}, 0.1);
    }
    L.ffn_norm = randn(rng, {d}, 0.1, 1.0);
    L.w_gate = randn(rng, {c.d_ff, d}, sd);
    L.w_up = randn(rng, {c.d_ff, d}, sd);
    L.w_down = randn(rng, {d, c.d_ff}, 1.0 / std::sqrt(static_cast<double>(c.d_ff)));
    t.layers.push_back(std::move(L));
  }
  t.out_norm = randn(rng, {d}, 0.1, 1.0);
  t.output = randn(rng, {c.n_vocab, d}, sd);
  return t;
}

std::shared_ptr<CausalLM> make_tiny_llama(const ModelConfig& cfg, uint64_t seed,
                                          double target_max_prob) {
  SD_CHECK(target_max_prob > 1.0 / static_cast<double>(cfg.n_vocab) && target_max_prob < 1.0,
           "make_tiny_llama: target_max_prob ", target_max_prob, " must be in (1/n_vocab, 1)");
  LlamaTensors t = make_tiny_llama_tensors(cfg, seed);
  // Logits are linear in the head's scale, so probe once with the unscaled head and
  // bisect for the scale; the probe is a seeded random token sequence.
  auto probe_model = make_llama(cfg, t);
  const int64_t n_probe = std::min<int64_t>(64, cfg.n_ctx > 0 ? cfg.n_ctx : 64);
  Rng rng(seed ^ 0x5eedULL);
  at::Tensor probe = at::empty({1, n_probe}, at::kLong);
  for (int64_t i = 0; i < n_probe; ++i)
    probe.data_ptr<int64_t>()[i] = static_cast<int64_t>(rng.next() % cfg.n_vocab);
  KVCache cache = probe_model->make_cache(1, n_probe);
  at::Tensor logits = probe_model->forward(probe, {0}, cache).view({n_probe, cfg.n_vocab});
  double lo = 0.0, hi = 1.0;
  while (mean_max_prob(logits, hi) < target_max_prob && hi < 1e6) hi *= 2;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    (mean_max_prob(logits, mid) < target_max_prob ? lo : hi) = mid;
  }
  t.output = t.output * (0.5 * (lo + hi));
  return make_llama(cfg, std::move(t));
}

}  // namespace specdec::model
