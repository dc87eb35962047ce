// Dequantisation of every supported ggml type on hand-built blocks. Each block's bytes
// are chosen here and the expected floats are worked out by hand from the format
// definition (ggml-common.h), written as literals or as the tiny tables derived below;
// nothing here calls the code under test to produce an expectation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/dequant.h"

using specdec::io::dequantize;
using specdec::io::GgmlType;

namespace {

// fp16 bit patterns used below: 1.0 = 0x3C00, 0.5 = 0x3800, 0.25 = 0x3400,
// 0.125 = 0x3000, 2.0 = 0x4000, -1.0 = 0xBC00.
void put_f16(std::vector<uint8_t>& b, size_t at, uint16_t h) {
  b[at] = static_cast<uint8_t>(h & 0xFF);
  b[at + 1] = static_cast<uint8_t>(h >> 8);
}

std::vector<float> run(GgmlType t, const std::vector<uint8_t>& block, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
  dequantize(t, block.data(), out.data(), n);
  return out;
}

}  // namespace

TEST(IoDequant, BlockAndTypeSizesMatchGgml) {
  using specdec::io::ggml_block_size;
  using specdec::io::ggml_type_size;
  EXPECT_EQ(ggml_type_size(GgmlType::Q4_0), 18);
  EXPECT_EQ(ggml_type_size(GgmlType::Q4_1), 20);
  EXPECT_EQ(ggml_type_size(GgmlType::Q5_0), 22);
  EXPECT_EQ(ggml_type_size(GgmlType::Q5_1), 24);
  EXPECT_EQ(ggml_type_size(GgmlType::Q8_0), 34);
  EXPECT_EQ(ggml_type_size(GgmlType::Q4_K), 144);
  EXPECT_EQ(ggml_type_size(GgmlType::Q5_K), 176);
  EXPECT_EQ(ggml_type_size(GgmlType::Q6_K), 210);
  EXPECT_EQ(ggml_type_size(GgmlType::Q2_K), 84);
  EXPECT_EQ(ggml_type_size(GgmlType::Q3_K), 110);
  EXPECT_EQ(ggml_type_size(GgmlType::Q8_K), 292);
  EXPECT_EQ(ggml_block_size(GgmlType::Q4_1), 32);
  EXPECT_EQ(ggml_block_size(GgmlType::Q6_K), 256);
  EXPECT_EQ(ggml_block_size(GgmlType::BF16), 1);
}

TEST(IoDequant, F32CopiesBytes) {
  std::vector<uint8_t> b(8);
  const float v[2] = {1.5f, -2.0f};
  std::memcpy(b.data(), v, 8);
  const auto y = run(GgmlType::F32, b, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -2.0f);
}

TEST(IoDequant, F16Values) {
  // 1.0, -2.0, 0.5, max half 65504, smallest subnormal 2^-24, -0, +inf
  const uint16_t h[7] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000, 0x7C00};
  std::vector<uint8_t> b(14);
  for (int i = 0; i < 7; ++i) put_f16(b, 2 * i, h[i]);
  const auto y = run(GgmlType::F16, b, 7);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_EQ(y[3], 65504.0f);
  EXPECT_EQ(y[4], std::ldexp(1.0f, -24));
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_TRUE(std::signbit(y[5]));
  EXPECT_TRUE(std::isinf(y[6]) && y[6] > 0);
  EXPECT_TRUE(std::isnan(specdec::io::fp16_to_fp32(0x7E00)));
}

TEST(IoDequant, Bf16Values) {
  // bf16 is the top half of an fp32: 0x3F80 = 1.0, 0xC040 = -3.0, 0x4049 = 0x40490000 = 3.140625
  std::vector<uint8_t> b(6);
  put_f16(b, 0, 0x3F80);
  put_f16(b, 2, 0xC040);
  put_f16(b, 4, 0x4049);
  const auto y = run(GgmlType::BF16, b, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 3.140625f);
}

TEST(IoDequant, Fp32ToFp16RoundsToNearestEven) {
  using specdec::io::fp32_to_fp16;
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-0.5f), 0xB800);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);                   // halfway to 65536 -> even -> inf
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, 0x3C00 is even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, rounds up to even
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);       // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);       // tie between 0 and 1 -> 0
  EXPECT_EQ(fp32_to_fp16(1.5f * std::ldexp(1.0f, -24)), 0x0002);  // tie between 1 and 2 -> 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);       // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(fp32_to_fp16(std::nanf("")) & 0x03FF, 0);
}

TEST(IoDequant, Q4_0) {
  // d = 0.5; byte j holds element j (low nibble j) and element j+16 (high nibble 15-j).
  std::vector<uint8_t> b(18);
  put_f16(b, 0, 0x3800);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = run(GgmlType::Q4_0, b, 32);
  EXPECT_EQ(y[0], -4.0f);   // (0 - 8) * 0.5
  EXPECT_EQ(y[15], 3.5f);   // (15 - 8) * 0.5
  EXPECT_EQ(y[16], 3.5f);   // (15 - 8) * 0.5
  EXPECT_EQ(y[31], -4.0f);  // (0 - 8) * 0.5
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(y[16 + j], 0.5f * (7 - j)) << j;
  }
}

TEST(IoDequant, Q4_1TwoBlocks) {
  // Block 0: d = 0.25, m = -1, nibbles as in Q4_0. Block 1: d = 1, m = 0.5, all bytes 0x21.
  std::vector<uint8_t> b(40);
  put_f16(b, 0, 0x3400);
  put_f16(b, 2, 0xBC00);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  put_f16(b, 20, 0x3C00);
  put_f16(b, 22, 0x3800);
  for (int j = 0; j < 16; ++j) b[24 + j] = 0x21;
  const auto y = run(GgmlType::Q4_1, b, 64);
  EXPECT_EQ(y[0], -1.0f);    // 0 * 0.25 - 1
  EXPECT_EQ(y[15], 2.75f);   // 15 * 0.25 - 1
  EXPECT_EQ(y[16], 2.75f);
  EXPECT_EQ(y[31], -1.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(y[16 + j], 0.25f * (15 - j) - 1.0f) << j;
    EXPECT_EQ(y[32 + j], 1.5f) << j;  // low nibble 1: 1 * 1 + 0.5
    EXPECT_EQ(y[48 + j], 2.5f) << j;  // high nibble 2: 2 * 1 + 0.5
  }
}

TEST(IoDequant, Q5_0) {
  // d = 2; qh = 0x80000001 (fifth bit of elements 0 and 31); qs[0] = 0x21, qs[15] = 0xF3.
  std::vector<uint8_t> b(22, 0);
  put_f16(b, 0, 0x4000);
  b[2] = 0x01;
  b[5] = 0x80;
  b[6 + 0] = 0x21;
  b[6 + 15] = 0xF3;
  const auto y = run(GgmlType::Q5_0, b, 32);
  EXPECT_EQ(y[0], 2.0f);     // (1 | 16) - 16 = 1, * 2
  EXPECT_EQ(y[16], -28.0f);  // 2 - 16 = -14, * 2
  EXPECT_EQ(y[15], -26.0f);  // 3 - 16
  EXPECT_EQ(y[31], 30.0f);   // (15 | 16) - 16 = 15
  for (int j : {1, 2, 14, 17, 30}) EXPECT_EQ(y[j], -32.0f) << j;  // (0 - 16) * 2
}

TEST(IoDequant, Q5_1) {
  // d = 0.5, m = 1; qh bit 16 set (element 16); qs[0] = 0x4F.
  std::vector<uint8_t> b(24, 0);
  put_f16(b, 0, 0x3800);
  put_f16(b, 2, 0x3C00);
  b[4 + 2] = 0x01;
  b[8] = 0x4F;
  const auto y = run(GgmlType::Q5_1, b, 32);
  EXPECT_EQ(y[0], 8.5f);    // 15 * 0.5 + 1
  EXPECT_EQ(y[16], 11.0f);  // (4 | 16) = 20 * 0.5 + 1
  for (int j : {1, 15, 17, 31}) EXPECT_EQ(y[j], 1.0f) << j;
}

TEST(IoDequant, Q8_0) {
  // d = 0.125, q_j = 8j - 128 -> x_j = j - 16
  std::vector<uint8_t> b(34);
  put_f16(b, 0, 0x3000);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(8 * j - 128));
  const auto y = run(GgmlType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], static_cast<float>(j - 16)) << j;
}

namespace {

// Q4_K/Q5_K header shared by both tests: d = 1, dmin = 0.5 and the 12 scale bytes that
// pack scales {1,2,3,4,33,34,35,63} and mins {0,1,2,3,16,17,18,40}:
//   bytes 0-3  = scale[0..3] | (scale[4..7] >> 4) << 6   -> 0x81 0x82 0x83 0xC4
//   bytes 4-7  = min[0..3]   | (min[4..7] >> 4) << 6     -> 0x40 0x41 0x42 0x83
//   bytes 8-11 = scale[4..7] & 15 | (min[4..7] & 15) << 4 -> 0x01 0x12 0x23 0x8F
void put_k4_header(std::vector<uint8_t>& b) {
  put_f16(b, 0, 0x3C00);
  put_f16(b, 2, 0x3800);
  const uint8_t scales[12] = {0x81, 0x82, 0x83, 0xC4, 0x40, 0x41, 0x42, 0x83, 0x01, 0x12, 0x23, 0x8F};
  std::memcpy(b.data() + 4, scales, 12);
}

// With every qs byte 0x5A (low nibble 10 for even sub-blocks, high nibble 5 for odd),
// element e of sub-block s = e / 32 is scale[s] * q - 0.5 * min[s]:
const float k4_default[8] = {
    1 * 10 - 0.0f,   // s0: 10
    2 * 5 - 0.5f,    // s1: 9.5
    3 * 10 - 1.0f,   // s2: 29
    4 * 5 - 1.5f,    // s3: 18.5
    33 * 10 - 8.0f,  // s4: 322
    34 * 5 - 8.5f,   // s5: 161.5
    35 * 10 - 9.0f,  // s6: 341
    63 * 5 - 20.0f,  // s7: 295
};

}  // namespace

TEST(IoDequant, Q4_K) {
  std::vector<uint8_t> b(144);
  put_k4_header(b);
  for (int i = 0; i < 128; ++i) b[16 + i] = 0x5A;
  b[16 + 0] = 0xF0;    // element 0 (s0, low) = 0, element 32 (s1, high) = 15
  b[16 + 127] = 0x1E;  // chunk 3, l = 31: element 223 (s6, low) = 14, element 255 (s7, high) = 1
  const auto y = run(GgmlType::Q4_K, b, 256);
  EXPECT_EQ(y[0], 0.0f);      // 1 * 0 - 0
  EXPECT_EQ(y[32], 29.5f);    // 2 * 15 - 0.5
  EXPECT_EQ(y[223], 481.0f);  // 35 * 14 - 9
  EXPECT_EQ(y[255], 43.0f);   // 63 * 1 - 20
  for (int e = 0; e < 256; ++e) {
    if (e == 0 || e == 32 || e == 223 || e == 255) continue;
    EXPECT_EQ(y[e], k4_default[e / 32]) << e;
  }
}

TEST(IoDequant, Q5_K) {
  std::vector<uint8_t> b(176, 0);
  put_k4_header(b);
  // qh[l] bit s is the fifth bit of element 32 s + l.
  b[16 + 0] = 0x01;   // element 0
  b[16 + 5] = 0x80;   // element 7 * 32 + 5 = 229
  b[16 + 31] = 0x0C;  // elements 2 * 32 + 31 = 95 and 3 * 32 + 31 = 127
  for (int i = 0; i < 128; ++i) b[48 + i] = 0x5A;
  b[48 + 0] = 0xF0;
  b[48 + 127] = 0x1E;
  const auto y = run(GgmlType::Q5_K, b, 256);
  EXPECT_EQ(y[0], 16.0f);      // 1 * (0 + 16) - 0
  EXPECT_EQ(y[32], 29.5f);     // 2 * 15 - 0.5
  EXPECT_EQ(y[95], 77.0f);     // 3 * (10 + 16) - 1
  EXPECT_EQ(y[127], 82.5f);    // 4 * (5 + 16) - 1.5
  EXPECT_EQ(y[223], 481.0f);   // 35 * 14 - 9
  EXPECT_EQ(y[229], 1303.0f);  // 63 * (5 + 16) - 20
  EXPECT_EQ(y[255], 43.0f);    // 63 * 1 - 20
  for (int e = 0; e < 256; ++e) {
    if (e == 0 || e == 32 || e == 95 || e == 127 || e == 223 || e == 229 || e == 255) continue;
    EXPECT_EQ(y[e], k4_default[e / 32]) << e;
  }
}

TEST(IoDequant, Q6_K) {
  // d = 0.5; scale of element e is scales[e / 16] = +-(i + 1): 1, -2, 3, -4, ..., 15, -16.
  // ql bytes 0x31 (low 1, high 3), qh bytes 0x1B (2-bit fields 3, 2, 1, 0 for k = 0..3).
  // Within each 128-element half, element 32 k + l takes: k0 low(ql[l]) | 3 << 4 = 49,
  // k1 low(ql[l+32]) | 2 << 4 = 33, k2 high(ql[l]) | 1 << 4 = 19, k3 high(ql[l+32]) = 3;
  // minus 32 gives q = 17, 1, -13, -29.
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[i] = 0x31;
  for (int i = 0; i < 64; ++i) b[128 + i] = 0x1B;
  for (int i = 0; i < 16; ++i) b[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(i % 2 ? -(i + 1) : i + 1));
  put_f16(b, 208, 0x3800);
  b[0] = 0xF0;         // element 0: 0 | 3 << 4 = 48 -> 16; element 64: 15 | 1 << 4 = 31 -> -1
  b[128 + 63] = 0xFF;  // second half, l = 31: every 2-bit field becomes 3
  const auto y = run(GgmlType::Q6_K, b, 256);
  EXPECT_EQ(y[0], 8.0f);      // 0.5 * 1 * 16
  EXPECT_EQ(y[64], -2.5f);    // 0.5 * scales[4] = 5 * -1
  EXPECT_EQ(y[159], -85.0f);  // 128 + 31, k0: 1 | 48 -> 17; 0.5 * -10 * 17
  EXPECT_EQ(y[191], -102.0f); // k1: 1 | 48 -> 17; 0.5 * scales[11] = -12 * 17
  EXPECT_EQ(y[223], -133.0f); // k2: 3 | 48 -> 19; 0.5 * -14 * 19
  EXPECT_EQ(y[255], -152.0f); // k3: 3 | 48 -> 19; 0.5 * -16 * 19
  const float q_by_k[4] = {17, 1, -13, -29};
  for (int e = 0; e < 256; ++e) {
    if (e == 0 || e == 64 || e == 159 || e == 191 || e == 223 || e == 255) continue;
    const int i = e / 16;
    const float scale = static_cast<float>(i % 2 ? -(i + 1) : i + 1);
    EXPECT_EQ(y[e], 0.5f * scale * q_by_k[(e % 128) / 32]) << e;
  }
}

TEST(IoDequant, UnsupportedTypesNameTheType) {
  std::vector<uint8_t> b(512, 0);
  std::vector<float> y(256);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q8_K, GgmlType::Q8_1}) {
    EXPECT_FALSE(specdec::io::ggml_type_supported(t));
    const int64_t n = specdec::io::ggml_block_size(t);
    try {
      dequantize(t, b.data(), y.data(), n);
      ADD_FAILURE() << "no error for " << specdec::io::ggml_type_name(t);
    } catch (const specdec::Error& e) {
      EXPECT_NE(std::string(e.what()).find(specdec::io::ggml_type_name(t)), std::string::npos) << e.what();
    }
  }
}

TEST(IoDequant, PartialBlockIsAnError) {
  std::vector<uint8_t> b(64, 0);
  std::vector<float> y(64);
  EXPECT_THROW(dequantize(GgmlType::Q8_0, b.data(), y.data(), 33), specdec::Error);
  EXPECT_THROW(dequantize(static_cast<GgmlType>(77), b.data(), y.data(), 1), specdec::Error);
}

TEST(IoDequant, EmptyTensorWithNullBuffers) {
  // Found by fuzz_gguf: a zero-element F32 tensor reached memcpy with a null destination.
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_1, GgmlType::Q6_K})
    EXPECT_NO_THROW(dequantize(t, nullptr, nullptr, 0));
}
