#pragma once
// Random GGUF tensors for tests and benchmarks: random codes with finite random scales (random
// bytes in an fp16 scale field could be inf or NaN), or random finite values for the float
// types. Used by test_model_panels and the dequantisation / panel-kernel benchmarks.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "io/dequant.h"
#include "io/gguf.h"

namespace specdec::testing {

// Byte offsets of a block's fp16 scale fields.
inline std::vector<int> f16_fields(io::GgmlType t) {
  using io::GgmlType;
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return {0};
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// A random [out, in] tensor of type t in GGUF's row-major blocks.
inline std::vector<uint8_t> random_tensor(io::GgmlType t, int64_t out, int64_t in, uint64_t seed) {
  using io::GgmlType;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f), scale(-0.05f, 0.05f);
  const int64_t bs = io::ggml_block_size(t), ts = io::ggml_type_size(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(out * in / bs * ts));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const int64_t n = out * in / bs;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* blk = bytes.data() + i * ts;
    if (t == GgmlType::F32) {
      const float v = val(rng);
      std::memcpy(blk, &v, 4);
    } else if (t == GgmlType::F16) {
      const uint16_t h = io::fp32_to_fp16(val(rng));
      std::memcpy(blk, &h, 2);
    } else if (t == GgmlType::BF16) {
      const float v = val(rng);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(blk, &h, 2);
    }
    for (int off : f16_fields(t)) {
      const uint16_t h = io::fp32_to_fp16(scale(rng));
      std::memcpy(blk + off, &h, 2);
    }
  }
  return bytes;
}

}  // namespace specdec::testing
