#pragma once
// dtype native against float32 on the same GGUF file: the logits of a prefill (23 rows),
// decode (1 row), a verification (5 rows), another decode and a second prefill (12 rows)
// through the KV cache must be bit-identical (model/panels.h: the native kernel forms each
// weight exactly as dequantisation does, and runs the same chain of multiply-adds), with
// either panel kernel (AVX-512 or portable, ctest runs both). Shared by the SmolLM2 test (CI)
// and the Qwen test (label slow).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "io/gguf.h"
#include "model/loader.h"
#include "model/panels.h"
#include "tokenizer/tokenizer.h"

namespace specdec::testing_native {

inline void expect_native_equals_float32(const std::string& path) {
  using namespace specdec::model;
  std::printf("panel kernel: %s\n", panels_kernel());
  set_threads(2);
  auto file = io::GgufFile::open(path);
  const auto f32 = load_llama_gguf(*file);
  const auto native = load_llama_gguf(*file, at::kFloat, GgufWeights::kNative);
  EXPECT_LT(native->weight_bytes() * 3, f32->weight_bytes()) << "native weights are not smaller";
  std::mt19937_64 rng(11);
  const int64_t vocab = f32->config().n_vocab;
  KVCache ca = f32->make_cache(1, 64), cb = native->make_cache(1, 64);
  for (int64_t rows : {23, 1, 5, 1, 12}) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < rows; ++i) ids.push_back(static_cast<int64_t>(rng() % vocab));
    const at::Tensor t = at::tensor(at::IntArrayRef(ids), at::kLong).view({1, -1});
    const int64_t at_pos = ca.length(0);
    const at::Tensor a = f32->forward(t, {at_pos}, ca);
    const at::Tensor b = native->forward(t, {at_pos}, cb);
    ASSERT_EQ(a.sizes(), b.sizes());
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0)
        << rows << " rows at position " << at_pos << ": max |diff| "
        << (a - b).abs().max().item<float>();
  }
}

// dtype native_q8 (int8 activations), or q4_1 (the same after requantising), against float32
// on a code prompt and 24 greedy steps: not equal, but close. Checks the largest logit
// difference against `max_logit_diff` (set from measurement with 2x headroom: a wrong scale or
// offset moves logits by whole units) and that the greedy continuations agree on the first
// `min_equal_tokens` tokens.
inline void expect_native_q8_close_to_float32(const std::string& path, float max_logit_diff, int min_equal_tokens,
                                              model::GgufWeights weights = model::GgufWeights::kNativeQ8) {
  using namespace specdec::model;
  std::printf("int8 panel kernel: %s\n", panels_int8_kernel());
  set_threads(2);
  auto file = io::GgufFile::open(path);
  const auto f32 = load_llama_gguf(*file);
  const auto q8 = load_llama_gguf(*file, at::kFloat, weights);
  const auto tok = tokenizer::Tokenizer::from_gguf(*file);
  const auto ids = tok->encode(
      "def binary_search(items, target):\n    \"\"\"Return the index of target in the sorted list items, "
      "or -1.\"\"\"\n    lo, hi = 0, len(items) - 1\n");
  const std::vector<int64_t> prompt(ids.begin(), ids.end());
  const at::Tensor t = at::tensor(at::IntArrayRef(prompt), at::kLong).view({1, -1});
  KVCache ca = f32->make_cache(1, 80), cb = q8->make_cache(1, 80);
  const at::Tensor a = f32->forward(t, {0}, ca), b = q8->forward(t, {0}, cb);
  const float diff = (a - b).abs().max().item<float>();
  const float agree = (a.argmax(-1) == b.argmax(-1)).to(at::kFloat).mean().item<float>();
  std::printf("int8 activations vs float32: max |logit diff| %.4f over %zu positions, top-1 agreement %.3f\n", diff,
              prompt.size(), agree);
  EXPECT_GT(diff, 0.0f) << "int8 activations should not be exact";
  EXPECT_LT(diff, max_logit_diff);
  // Greedy continuations, each model from its own logits.
  int64_t na = a[0][-1].argmax().item<int64_t>(), nb = b[0][-1].argmax().item<int64_t>();
  int equal = 0;
  for (int i = 0; i < 24 && na == nb; ++i, ++equal) {
    const at::Tensor x = at::tensor({na}, at::kLong).view({1, 1});
    na = f32->forward(x, {ca.length(0)}, ca)[0][0].argmax().item<int64_t>();
    nb = q8->forward(x, {cb.length(0)}, cb)[0][0].argmax().item<int64_t>();
  }
  std::printf("int8 activations vs float32: greedy continuations equal for %d of 24 tokens\n", equal);
  EXPECT_GE(equal, min_equal_tokens);
}

}  // namespace specdec::testing_native
