#include "io/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/dequant.h"

namespace specdec::io {

bool ggml_type_quantizable(GgmlType t) { return t == GgmlType::Q4_1; }

namespace {

void quantize_q4_1_block(const float* x, uint8_t* dst, const char* who) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  SD_CHECK(std::isfinite(lo) && std::isfinite(hi), who, ": a block holds a non-finite value (", lo, " .. ", hi, ")");
  // The codes are chosen against the stored (fp16-rounded) d and m, the values that
  // dequantisation will use.
  const uint16_t dh = fp32_to_fp16((hi - lo) / 15.0f), mh = fp32_to_fp16(lo);
  const float d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[32];
  for (int i = 0; i < 32; ++i)
    q[i] = static_cast<uint8_t>(std::clamp(std::lround((x[i] - m) * inv), 0L, 15L));
  std::memcpy(dst, &dh, 2);
  std::memcpy(dst + 2, &mh, 2);
  for (int j = 0; j < 16; ++j) dst[4 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));  // ggml's nibble order
}

}  // namespace

void quantize(GgmlType t, const float* src, uint8_t* dst, int64_t n, const char* who) {
  SD_CHECK(ggml_type_quantizable(t), who, ": cannot quantise to ggml type ", ggml_type_name(t), " (supported: Q4_1)");
  const int64_t block = ggml_block_size(t), bytes = ggml_type_size(t);
  SD_CHECK(n % block == 0, who, ": ", n, " values are not a whole number of ", ggml_type_name(t), " blocks of ", block);
  for (int64_t b = 0; b < n / block; ++b) quantize_q4_1_block(src + b * block, dst + b * bytes, who);
}

}  // namespace specdec::io
