// Quantisation to Q4_1 (io/quantize.h, dtype q4_1): exact where the values are on the grid, and
// otherwise within half a step of every value, with ggml's byte layout (read back through
// dequantize(), whose own tests check it against hand-worked blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/dequant.h"
#include "io/quantize.h"

using specdec::io::dequantize;
using specdec::io::fp16_to_fp32;
using specdec::io::GgmlType;
using specdec::io::quantize;

namespace {

std::vector<float> round_trip(const std::vector<float>& x) {
  std::vector<uint8_t> blocks(x.size() / 32 * 20);
  quantize(GgmlType::Q4_1, x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  dequantize(GgmlType::Q4_1, blocks.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

}  // namespace

TEST(IoQuantize, ValuesOnTheGridComeBackExactly) {
  // Block 0: m = -1, d = 0.25 and codes 0..15, 15..0 (both ends present, so min and max give
  // back exactly d and m); block 1: m = 0.5, d = 2, codes j % 16 in another order. A swapped
  // nibble order or an off-by-one code would change values.
  std::vector<float> x(64);
  for (int j = 0; j < 16; ++j) {
    x[j] = -1.0f + 0.25f * j;
    x[16 + j] = -1.0f + 0.25f * (15 - j);
    x[32 + j] = 0.5f + 2.0f * ((j * 7) % 16);
    x[48 + j] = 0.5f + 2.0f * ((j * 5 + 3) % 16);
  }
  EXPECT_EQ(round_trip(x), x);
}

TEST(IoQuantize, ConstantBlockIsExactAndNeedsNoStep) {
  const std::vector<float> x(32, -0.375f);  // fp16-exact
  EXPECT_EQ(round_trip(x), x);
}

TEST(IoQuantize, EveryValueWithinHalfAStep) {
  std::mt19937 rng(5);
  for (float scale : {1e-3f, 0.05f, 1.0f, 30.0f}) {
    std::normal_distribution<float> normal(0.1f * scale, scale);
    std::vector<float> x(32 * 64);
    for (float& v : x) v = normal(rng);
    x[7] = 8 * scale;  // one outlier
    const std::vector<float> y = round_trip(x);
    double sq = 0, sq_step = 0;
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float lo = x[b * 32], hi = lo;
      for (int i = 0; i < 32; ++i) lo = std::min(lo, x[b * 32 + i]), hi = std::max(hi, x[b * 32 + i]);
      const float step = (hi - lo) / 15;
      // Half a step, plus what fp16 rounding of m (and of d, times at most 15 codes) can add.
      const float bound = step / 2 + std::abs(lo) * 0x1p-11f + 15 * step * 0x1p-11f + 1e-6f * scale;
      for (int i = 0; i < 32; ++i) {
        const float e = std::abs(y[b * 32 + i] - x[b * 32 + i]);
        EXPECT_LE(e, bound) << "scale " << scale << " block " << b << " element " << i;
        sq += static_cast<double>(e) * e;
      }
      sq_step += static_cast<double>(step) * step * 32;
    }
    // Rounding to the nearest code: the mean squared error is about step^2 / 12, far below the
    // (step / 2)^2 that a consistent half-step bias (truncation instead of rounding) would give.
    EXPECT_LT(sq / sq_step, 1.5 / 12) << "scale " << scale;
  }
}

TEST(IoQuantize, BadInputIsANamedError) {
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> b(20);
  x[3] = std::numeric_limits<float>::infinity();
  try {
    quantize(GgmlType::Q4_1, x.data(), b.data(), 32, "tensor blk.0.ffn_up.weight");
    ADD_FAILURE() << "no error for an infinite value";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
  }
  x[3] = 1.0f;
  EXPECT_THROW(quantize(GgmlType::Q4_1, x.data(), b.data(), 31), specdec::Error);  // not whole blocks
  try {
    quantize(GgmlType::Q6_K, x.data(), b.data(), 32);
    ADD_FAILURE() << "no error for Q6_K";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q6_K"), std::string::npos) << e.what();
  }
}
