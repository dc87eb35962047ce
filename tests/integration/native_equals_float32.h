#pragma once
// dtype native against float32 on the same GGUF file: the logits of a prefill (23 rows),
// decode (1 row), a verification (5 rows), another decode and a second prefill (12 rows)
// through the KV cache must be bit-identical (model/panels.h: the native kernel forms each
// weight exactly as dequantisation does, and runs the same chain of multiply-adds), with
// either panel kernel (AVX-512 or portable, ctest runs both). Shared by the SmolLM2 test (CI)
// and the Qwen test (label slow).
#include <gtest/gtest.h>

#include <algorithm>
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
// on a code prompt, then 16 decode steps through the KV cache with both models fed float32's
// greedy tokens (teacher-forced: a near-tie that the kernels' last bits flip changes that one
// position's argmax, where a free-running greedy race would end there, after 1 token on one CPU
// and 2 on another). Not equal, but close: the largest logit difference under `max_logit_diff`
// (set from measurement with ~2x headroom: a wrong scale or offset moves logits by whole units)
// and top-1 agreement over the prompt's and the decode steps' positions at least
// `min_agreement` (a wrong scale or KV position collapses it).
inline void expect_native_q8_close_to_float32(const std::string& path, float max_logit_diff, double min_agreement,
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
  const int64_t n_decode = 16;
  KVCache ca = f32->make_cache(1, static_cast<int64_t>(prompt.size()) + n_decode),
          cb = q8->make_cache(1, static_cast<int64_t>(prompt.size()) + n_decode);
  const at::Tensor a = f32->forward(t, {0}, ca)[0], b = q8->forward(t, {0}, cb)[0];  // [prompt, V]
  const float prefill_diff = (a - b).abs().max().item<float>();
  int64_t agree_prefill = (a.argmax(-1) == b.argmax(-1)).sum().item<int64_t>(), agree_decode = 0;
  float decode_diff = 0;
  int64_t next = a[-1].argmax().item<int64_t>();
  for (int64_t i = 0; i < n_decode; ++i) {
    const at::Tensor x = at::tensor({next}, at::kLong).view({1, 1});
    const at::Tensor ra = f32->forward(x, {ca.length(0)}, ca)[0][0], rb = q8->forward(x, {cb.length(0)}, cb)[0][0];
    decode_diff = std::max(decode_diff, (ra - rb).abs().max().item<float>());
    next = ra.argmax().item<int64_t>();
    agree_decode += next == rb.argmax().item<int64_t>();
  }
  const double agreement = static_cast<double>(agree_prefill + agree_decode) /
                           static_cast<double>(static_cast<int64_t>(prompt.size()) + n_decode);
  std::printf("int8 activations vs float32: max |logit diff| %.4f over %zu prompt positions, %.4f over %lld decode "
              "steps; top-1 agreement %lld/%zu and %lld/%lld (%.3f)\n",
              prefill_diff, prompt.size(), decode_diff, static_cast<long long>(n_decode),
              static_cast<long long>(agree_prefill), prompt.size(), static_cast<long long>(agree_decode),
              static_cast<long long>(n_decode), agreement);
  EXPECT_GT(prefill_diff, 0.0f) << "int8 activations should not be exact";
  EXPECT_LT(prefill_diff, max_logit_diff);
  EXPECT_LT(decode_diff, max_logit_diff);
  EXPECT_GE(agreement, min_agreement);
}

}  // namespace specdec::testing_native
