#pragma once
// dtype native against float32 on the same GGUF file: the logits of a prefill (23 rows),
// decode (1 row), a verification (5 rows), another decode and a second prefill (12 rows)
// through the KV cache must be bit-identical (model/panels.h: the native kernel forms each
// weight exactly as dequantisation does, and runs the same FMA chain). Shared by the SmolLM2
// test (CI) and the Qwen test (label slow).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "io/gguf.h"
#include "model/loader.h"
#include "model/panels.h"

namespace specdec::testing_native {

inline void expect_native_equals_float32(const std::string& path) {
  using namespace specdec::model;
  if (!panels_supported()) GTEST_SKIP() << "dtype native needs AVX-512F";
  set_threads(2);
  auto file = io::GgufFile::open(path);
  const auto f32 = load_llama_gguf(*file);
  const auto native = load_llama_gguf(*file, at::kFloat, /*native=*/true);
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

}  // namespace specdec::testing_native
