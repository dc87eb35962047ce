// The Llama forward pass on tiny random models (no weights needed): agreement with a
// naive reference written from the HF definition, KV-cache consistency (incremental ==
// full, chunked == one-shot, rollback == never having gone further, ragged batches ==
// sequences alone), GGUF row un-permutation, RoPE scaling, input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "model/checks.h"
#include "model/llama.h"
#include "model/loader.h"
#include "model/tiny.h"
#include "../ragged_forward.h"

using namespace specdec;
using namespace specdec::model;

namespace {

at::Tensor random_tokens(int64_t n, int64_t vocab, uint64_t seed) {  // [1, n]
  Rng rng(seed);
  at::Tensor t = at::empty({1, n}, at::kLong);
  for (int64_t i = 0; i < n; ++i) t.data_ptr<int64_t>()[i] = rng.next() % vocab;
  return t;
}

float max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<float>();
}

// Straightforward HF-style forward of the whole sequence, repeating K/V per head and
// using an explicit causal mask: an independent statement of the math. tokens: [T].
at::Tensor reference_forward(const ModelConfig& c, const LlamaTensors& w, const at::Tensor& tokens) {
  const int64_t T = tokens.size(0), H = c.n_heads, Hkv = c.n_kv_heads, hd = c.head_dim;
  auto norm = [&](const at::Tensor& x, const at::Tensor& g) {
    return g * (x / at::sqrt(x.pow(2).mean(-1, true) + c.norm_eps));
  };
  at::Tensor inv = rope_inv_freq(c);
  at::Tensor ang = at::outer(at::arange(T, at::kFloat), inv);   // [T, hd/2]
  at::Tensor cos = at::cat({ang.cos(), ang.cos()}, -1);          // [T, hd]
  at::Tensor sin = at::cat({ang.sin(), ang.sin()}, -1);
  auto rope = [&](const at::Tensor& x) {  // x: [n_h, T, hd]
    at::Tensor rot = at::cat({-x.narrow(2, hd / 2, hd / 2), x.narrow(2, 0, hd / 2)}, -1);
    return x * cos + rot * sin;
  };
  at::Tensor x = w.tok_embd.index_select(0, tokens);  // [T, d]
  at::Tensor causal = at::ones({T, T}, at::kBool).triu(1);
  for (const auto& L : w.layers) {
    at::Tensor h = norm(x, L.attn_norm);
    at::Tensor q = at::matmul(h, L.wq.t()), k = at::matmul(h, L.wk.t()), v = at::matmul(h, L.wv.t());
    if (c.qkv_bias) { q = q + L.bq; k = k + L.bk; v = v + L.bv; }
    q = rope(q.view({T, H, hd}).transpose(0, 1));
    k = rope(k.view({T, Hkv, hd}).transpose(0, 1)).repeat_interleave(H / Hkv, 0);
    v = v.view({T, Hkv, hd}).transpose(0, 1).repeat_interleave(H / Hkv, 0);
    at::Tensor s = at::matmul(q, k.transpose(1, 2)) / std::sqrt(double(hd));  // [H, T, T]
    s = s.masked_fill(causal, -INFINITY);
    at::Tensor o = at::matmul(at::softmax(s, -1), v).transpose(0, 1).reshape({T, H * hd});
    x = x + at::matmul(o, L.wo.t());
    h = norm(x, L.ffn_norm);
    at::Tensor g = at::matmul(h, L.w_gate.t());
    x = x + at::matmul(g * at::sigmoid(g) * at::matmul(h, L.w_up.t()), L.w_down.t());
  }
  at::Tensor head = w.output.defined() ? w.output : w.tok_embd;
  return at::matmul(norm(x, w.out_norm), head.t());  // [T, V]
}

ModelConfig qwen_like() {  // q/k/v bias, one kv head (MQA), bigger head
  ModelConfig c = tiny_llama_config();
  c.arch = "qwen2";
  c.qkv_bias = true;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 16;
  c.rope_theta = 1e6;
  return c;
}

}  // namespace

// Tolerances: the same fp32 math with different matmul shapes (1 row vs many, batched vs
// not) differs by summation order only: ~1e-6 on these logits of magnitude ~1-10.
constexpr float kTol = 1e-5f;
// Against the reference, whose ATen matmuls pick their kernels by CPU: 1e-5 relative to the
// largest logit. (On an AVX-512 Xeon of 2026-11-28 the portable engine's tied head was 1.14e-5
// off logits of magnitude ~10, past a flat 1e-5; a wrong weight or step is off by 0.1 or more.)
float reference_tol(const at::Tensor& want) { return kTol * std::max(1.0f, want.abs().max().item<float>()); }

TEST(LlamaTiny, MatchesNaiveReferenceForward) {
  for (const ModelConfig& c : {tiny_llama_config(), qwen_like()}) {
    LlamaTensors w = make_tiny_llama_tensors(c, 7);
    auto model = make_llama(c, w);
    at::Tensor tokens = random_tokens(20, c.n_vocab, 1);
    KVCache cache = model->make_cache(1, 32);
    at::Tensor got = model->forward(tokens, {0}, cache)[0];
    at::Tensor want = reference_forward(c, w, tokens[0]);
    EXPECT_LT(max_diff(got, want), reference_tol(want)) << c.arch;
    EXPECT_EQ(cache.length(0), 20);
  }
}

TEST(LlamaTiny, TiedHeadUsesTheEmbedding) {
  ModelConfig c = tiny_llama_config();
  LlamaTensors w = make_tiny_llama_tensors(c, 3);
  w.output = at::Tensor();
  auto model = make_llama(c, w);
  EXPECT_TRUE(model->config().tie_embeddings);
  at::Tensor tokens = random_tokens(6, c.n_vocab, 2);
  KVCache cache = model->make_cache(1, 8);
  const at::Tensor want = reference_forward(c, w, tokens[0]);
  EXPECT_LT(max_diff(model->forward(tokens, {0}, cache)[0], want), reference_tol(want));
}

TEST(LlamaTiny, IncrementalDecodeEqualsFullForward) {
  for (const ModelConfig& c : {tiny_llama_config(), qwen_like()}) {
    auto model = make_tiny_llama(c, 11);
    const int64_t n = 24;
    at::Tensor tokens = random_tokens(n, c.n_vocab, 5);
    KVCache full_cache = model->make_cache(1, n);
    at::Tensor full = model->forward(tokens, {0}, full_cache);  // [1, n, V]
    KVCache cache = model->make_cache(1, n);
    for (int64_t t = 0; t < n; ++t) {
      at::Tensor step = model->forward(tokens.narrow(1, t, 1), {t}, cache);  // [1, 1, V]
      ASSERT_LT(max_diff(step[0][0], full[0][t]), kTol) << c.arch << " position " << t;
      ASSERT_EQ(cache.length(0), t + 1);
    }
  }
}

TEST(LlamaTiny, ChunkedPrefillEqualsOneShot) {
  auto model = make_tiny_llama(tiny_llama_config(), 2);
  at::Tensor tokens = random_tokens(30, 32, 9);
  KVCache one = model->make_cache(1, 40);
  at::Tensor full = model->forward(tokens, {0}, one);
  KVCache cache = model->make_cache(1, 40);
  int64_t pos = 0;
  for (int64_t len : {3, 8, 1, 18}) {
    at::Tensor part = model->forward(tokens.narrow(1, pos, len), {pos}, cache);
    EXPECT_LT(max_diff(part[0], full[0].narrow(0, pos, len)), kTol) << "chunk at " << pos;
    pos += len;
  }
  EXPECT_EQ(cache.length(0), 30);
}

TEST(LlamaTiny, RollbackEqualsNeverHavingGoneFurther) {
  auto model = make_tiny_llama(tiny_llama_config(), 4);
  at::Tensor prefix = random_tokens(10, 32, 1), junk = random_tokens(5, 32, 2);
  at::Tensor next = random_tokens(5, 32, 3);
  KVCache clean = model->make_cache(1, 20);
  model->forward(prefix, {0}, clean);
  at::Tensor want = model->forward(next, {10}, clean);
  // Explicit truncate after a rejected suffix.
  KVCache a = model->make_cache(1, 20);
  model->forward(prefix, {0}, a);
  model->forward(junk, {10}, a);
  a.truncate(0, 10);
  EXPECT_EQ(max_diff(model->forward(next, {10}, a), want), 0.f);
  // Implicit rollback: a start below the cached length overwrites from there.
  KVCache b = model->make_cache(1, 20);
  model->forward(prefix, {0}, b);
  model->forward(junk, {10}, b);
  EXPECT_EQ(max_diff(model->forward(next, {10}, b), want), 0.f);
  EXPECT_EQ(b.length(0), 15);
}

TEST(LlamaTiny, RaggedBatchEqualsEachSequenceAlone) {
  auto model = make_tiny_llama(tiny_llama_config(), 6);
  at::Tensor p0 = random_tokens(7, 32, 10), p1 = random_tokens(3, 32, 11);
  at::Tensor n0 = random_tokens(4, 32, 12), n1 = random_tokens(4, 32, 13);
  auto alone = [&](const at::Tensor& p, const at::Tensor& n) {
    KVCache c = model->make_cache(1, 16);
    model->forward(p, {0}, c);
    return model->forward(n, {p.size(1)}, c)[0];  // [4, V]
  };
  KVCache c = model->make_cache(2, 16);
  // Prefill the two prompts through the same batched cache at different lengths.
  KVCache c0 = model->make_cache(1, 16), c1 = model->make_cache(1, 16);
  model->forward(p0, {0}, c0);
  model->forward(p1, {0}, c1);
  for (int64_t l = 0; l < c.n_layers(); ++l) {
    c.k(l)[0].copy_(c0.k(l)[0]);
    c.v(l)[0].copy_(c0.v(l)[0]);
    c.k(l)[1].copy_(c1.k(l)[0]);
    c.v(l)[1].copy_(c1.v(l)[0]);
  }
  c.set_length(0, 7);
  c.set_length(1, 3);
  at::Tensor both = model->forward(at::cat({n0, n1}, 0), {7, 3}, c);  // [2, 4, V]
  EXPECT_LT(max_diff(both[0], alone(p0, n0)), kTol);
  EXPECT_LT(max_diff(both[1], alone(p1, n1)), kTol);
  EXPECT_EQ(c.lengths(), (std::vector<int64_t>{11, 7}));
  // One token each, again at different positions (the decode step of a batch).
  at::Tensor step = model->forward(at::cat({n1.narrow(1, 0, 1), n0.narrow(1, 0, 1)}, 0), {11, 7}, c);
  at::Tensor s0 = alone(at::cat({p0, n0}, 1), n1.narrow(1, 0, 1));
  at::Tensor s1 = alone(at::cat({p1, n1}, 1), n0.narrow(1, 0, 1));
  EXPECT_LT(max_diff(step[0], s0), kTol);
  EXPECT_LT(max_diff(step[1], s1), kTol);
}

// ForwardOptions::n_fed: each sequence feeds its own number of tokens (0 included) with no
// padding computed or cached; every fed row equals the sequence fed alone, bit for bit.
TEST(LlamaTiny, RaggedFedCountsEqualEachSequenceAloneBitForBit) {
  auto model = make_tiny_llama(tiny_llama_config(), 6);
  testing_ragged::expect_ragged_equals_alone(*model);
}

// ForwardOptions::logits_last: the output head over each sequence's last k fed tokens only
// ([B, k, V], row j = fed token max(0, n - k) + j, zero rows past the last) equals those rows of
// the full forward bit for bit, ragged (0, 1, 3 and 5 of 5 tokens fed) and dense, k below, at
// and above the longest feed; last_logit_rows (checks.h) makes the same layout from the full
// logits. A wrong row (off by one either way) or a lost sequence fails it. Bad k is named.
TEST(LlamaTiny, LogitsOfTheLastFedTokensEqualTheFullForwards) {
  auto model = make_tiny_llama(tiny_llama_config(), 5);
  const int64_t B = 4, T = 5, V = model->config().n_vocab;
  const at::Tensor tokens = at::randint(1, V, {B, T}, at::kLong);
  for (const std::vector<int64_t>& n_fed : {std::vector<int64_t>{5, 0, 3, 1}, std::vector<int64_t>{}}) {
    ForwardOptions full_opt;
    full_opt.n_fed = n_fed;
    KVCache full_cache = model->make_cache(B, 16);
    const at::Tensor full = model->forward(tokens, {0, 0, 0, 0}, full_cache, full_opt).logits;  // [B, T, V]
    for (int64_t k : {1, 2, 5, 7}) {
      ForwardOptions opt = full_opt;
      opt.logits_last = k;
      KVCache cache = model->make_cache(B, 16);
      const at::Tensor part = model->forward(tokens, {0, 0, 0, 0}, cache, opt).logits;
      ASSERT_EQ(part.sizes(), (at::IntArrayRef{B, k, V})) << "k " << k;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = n_fed.empty() ? T : n_fed[b], m = std::min(n, k);
        if (m > 0) EXPECT_TRUE(at::equal(part[b].narrow(0, 0, m), full[b].narrow(0, n - m, m))) << b << ", k " << k;
        if (m < k) EXPECT_TRUE(at::equal(part[b].narrow(0, m, k - m), at::zeros({k - m, V}))) << b << ", k " << k;
      }
      EXPECT_TRUE(at::equal(part, last_logit_rows(full, n_fed, k))) << "k " << k;
      EXPECT_TRUE(at::equal(cache.k(0), full_cache.k(0))) << "the cache is the full forward's, k " << k;
    }
  }
  ForwardOptions bad;
  bad.logits_last = -1;
  KVCache cache = model->make_cache(1, 8);
  try {
    model->forward(tokens.narrow(0, 0, 1), {0}, cache, bad);
    ADD_FAILURE() << "no error for logits_last = -1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits_last = -1 must be >= 0"), std::string::npos) << e.what();
  }
}

TEST(LlamaTiny, RaggedFedCountsBadInputsThrowNamedErrors) {
  auto model = make_tiny_llama(tiny_llama_config(), 0);
  KVCache cache = model->make_cache(2, 8);
  ForwardOptions opt;
  const auto message = [&](std::vector<int64_t> n_fed, const at::Tensor& tokens) {
    opt.n_fed = std::move(n_fed);
    try {
      model->forward(tokens, {0, 0}, cache, opt);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({3, 1}, at::zeros({2, 2}, at::kLong)).find("n_fed[0] = 3 must be in [0, 2]"), std::string::npos);
  EXPECT_NE(message({-1, 1}, at::zeros({2, 2}, at::kLong)).find("n_fed[0] = -1"), std::string::npos);
  EXPECT_NE(message({1}, at::zeros({2, 2}, at::kLong)).find("n_fed has 1 entries for a batch of 2"), std::string::npos);
  // A fed token out of the vocabulary is still an error; an unfed one is never read.
  at::Tensor tokens = at::full({2, 2}, 99, at::kLong);
  tokens[0][0] = 1;
  tokens[1][0] = 2;
  EXPECT_EQ(message({1, 1}, tokens), "no error");
  EXPECT_NE(message({2, 1}, tokens).find("token id 99 at [0, 1]"), std::string::npos);
  // Only start + n_fed must fit the cache (max_seq 8).
  EXPECT_EQ(message({1, 0}, at::zeros({2, 9}, at::kLong)), "no error");
  EXPECT_NE(message({9, 0}, at::zeros({2, 9}, at::kLong)).find("would reach 9 positions"), std::string::npos);
}

TEST(LlamaTiny, SeedsAreDeterministicAndDistinct) {
  auto a = make_tiny_llama(tiny_llama_config(), 1), b = make_tiny_llama(tiny_llama_config(), 1);
  auto d = make_tiny_llama(tiny_llama_config(), 2);
  at::Tensor tokens = random_tokens(8, 32, 0);
  KVCache ca = a->make_cache(1, 8), cb = b->make_cache(1, 8), cd = d->make_cache(1, 8);
  at::Tensor la = a->forward(tokens, {0}, ca), lb = b->forward(tokens, {0}, cb);
  EXPECT_EQ(max_diff(la, lb), 0.f);
  EXPECT_GT(max_diff(la, d->forward(tokens, {0}, cd)), 0.1f);
}

// Strategy Monte-Carlo tests need spread distributions: mean max probability of the
// next-token distribution (over a sequence unrelated to the calibration probe) in [0.2, 0.6].
TEST(LlamaTiny, NextTokenDistributionsAreSpread) {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    auto m = make_tiny_llama(tiny_llama_config(), seed);
    at::Tensor tokens = random_tokens(100, 32, 1000 + seed);
    KVCache c = m->make_cache(1, 100);
    at::Tensor p = at::softmax(m->forward(tokens, {0}, c)[0], -1);  // [100, V]
    double mean_max = p.amax(-1).mean().item<double>();
    EXPECT_GT(mean_max, 0.2) << "seed " << seed;
    EXPECT_LT(mean_max, 0.6) << "seed " << seed;
    EXPECT_LT(p.amax(-1).max().item<double>(), 0.999) << "seed " << seed;  // not one-hot
  }
}

TEST(LlamaTiny, Bf16WeightsStayCloseToFp32) {
  ModelConfig c = tiny_llama_config();
  LlamaTensors w = make_tiny_llama_tensors(c, 5);
  auto f32 = make_llama(c, w), bf16 = make_llama(c, w, at::kBFloat16);
  at::Tensor tokens = random_tokens(12, 32, 4);
  KVCache a = f32->make_cache(1, 12), b = bf16->make_cache(1, 12);
  at::Tensor la = f32->forward(tokens, {0}, a), lb = bf16->forward(tokens, {0}, b);
  // bf16 keeps 8 mantissa bits: relative weight error ~4e-3, logits here are O(1).
  EXPECT_LT(max_diff(la, lb), 0.05f);
  EXPECT_LT(bf16->weight_bytes(), f32->weight_bytes());
}

TEST(LlamaTiny, UnpermuteRopeRowsInvertsTheGgufConverter) {
  // llama.cpp convert: w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2).reshape(w.shape)
  const int64_t n_head = 3, hd = 8, in = 5;
  at::Tensor hf = at::arange(n_head * hd * in, at::kFloat).view({n_head * hd, in});
  at::Tensor gguf = hf.reshape({n_head, 2, hd / 2, in}).transpose(1, 2).reshape({n_head * hd, in});
  EXPECT_FALSE(gguf.equal(hf));
  EXPECT_TRUE(unpermute_rope_rows(gguf, n_head).equal(hf));
  at::Tensor bias = at::arange(n_head * hd, at::kFloat);
  at::Tensor gbias = bias.reshape({n_head, 2, hd / 2}).transpose(1, 2).reshape({n_head * hd});
  EXPECT_TRUE(unpermute_rope_rows(gbias, n_head).equal(bias));
  EXPECT_THROW(unpermute_rope_rows(hf, 7), Error);
}

TEST(LlamaTiny, RopeScaling) {
  ModelConfig c = tiny_llama_config();
  c.head_dim = 64;
  c.rope_theta = 500000.0;
  at::Tensor base = rope_inv_freq(c);
  EXPECT_NEAR(base[1].item<double>(), std::pow(500000.0, -2.0 / 64), 1e-7);
  c.rope_scaling_type = "linear";
  c.rope_scaling_factor = 4.0;
  EXPECT_LT(max_diff(rope_inv_freq(c), base / 4), 1e-9f);
  // llama3 (Llama 3.1: factor 8, low 1, high 4, original 8192): wavelengths below 2048
  // keep their frequency, above 8192 are divided by 8, in between interpolate.
  c.rope_scaling_type = "llama3";
  c.rope_scaling_factor = 8.0;
  at::Tensor s = rope_inv_freq(c);
  for (int64_t i = 0; i < 32; ++i) {
    double f = base[i].item<double>(), wl = 2 * M_PI / f, got = s[i].item<double>(), want;
    if (wl < 2048) want = f;
    else if (wl > 8192) want = f / 8;
    else {
      double sm = (8192 / wl - 1) / (4 - 1);
      want = (1 - sm) * f / 8 + sm * f;
    }
    EXPECT_NEAR(got, want, 1e-6 * f) << i;
  }
  c.rope_scaling_type = "yarn";
  EXPECT_THROW(rope_inv_freq(c), Error);
}

TEST(LlamaTiny, BadInputsThrowNamedErrors) {
  ModelConfig c = tiny_llama_config();
  auto model = make_tiny_llama(c, 0);
  KVCache cache = model->make_cache(1, 8);
  EXPECT_THROW(model->forward(at::full({1, 2}, 32, at::kLong), {0}, cache), Error);  // id >= V
  EXPECT_THROW(model->forward(at::full({1, 2}, -1, at::kLong), {0}, cache), Error);
  EXPECT_THROW(model->forward(at::zeros({1, 2}, at::kLong), {1}, cache), Error);  // gap
  EXPECT_THROW(model->forward(at::zeros({1, 9}, at::kLong), {0}, cache), Error);  // > max_seq
  EXPECT_THROW(model->forward(at::zeros({2, 2}, at::kLong), {0, 0}, cache), Error);  // batch
  EXPECT_THROW(model->forward(at::zeros({1, 2}, at::kLong), {0, 0}, cache), Error);
  EXPECT_THROW(model->forward(at::zeros({2}, at::kLong), {0}, cache), Error);
  EXPECT_EQ(cache.length(0), 0);
  LlamaTensors w = make_tiny_llama_tensors(c, 0);
  w.layers[1].wk = at::zeros({64, 32});
  try {
    make_llama(c, w);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers[1].wk"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[16, 32]"), std::string::npos) << e.what();
  }
  ModelConfig bad = c;
  bad.n_kv_heads = 3;  // 4 heads are not a multiple of 3
  EXPECT_THROW(make_llama(bad, make_tiny_llama_tensors(bad, 0)), Error);
}
