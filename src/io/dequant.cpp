// fp32 dequantisation of ggml block formats. Layouts (ggml-common.h):
//   Q4_0 {f16 d; u8 qs[16]}            x = (nibble - 8) * d
//   Q4_1 {f16 d, m; u8 qs[16]}         x = nibble * d + m
//   Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}  x = (nibble | high_bit << 4) - 16) * d
//   Q5_1 {f16 d, m; u8 qh[4]; qs[16]}  x = (nibble | high_bit << 4) * d + m
//   Q8_0 {f16 d; i8 qs[32]}            x = q * d
// In the 32-element formats, byte j holds element j in its low nibble and element j+16
// in its high nibble; the fifth bit of element i is bit i of the little-endian qh.
// K-quants use super-blocks of 256 elements split into sub-blocks with their own scale:
//   Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}          8 sub-blocks of 32, 6-bit scale/min
//   Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
//   Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}    16 sub-blocks of 16, 8-bit scales
#include "io/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace specdec::io {
namespace {

constexpr int64_t k_qk = 32;    // elements per block of the 32-element formats
constexpr int64_t k_qk_k = 256;  // elements per K-quant super-block

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Branch-free so that the
// F16 loop vectorises: for normals, shifting the 15 exponent+mantissa bits into fp32
// position and multiplying by 2^-112 rebiases the exponent (127 - 15 = 112), and inf/NaN
// survive because the pre-scaled exponent field (31 + 224) is already all ones. Subnormal
// halves are m * 2^-24: placing m in the mantissa of 0.5 (= 2^-1 * (1 + m * 2^-23)) and
// subtracting 0.5 gives exactly that, since m * 2^-24 = 0.5 * m * 2^-23.
inline float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t body = w << 1;  // exponent and mantissa at the top, sign dropped
  const float normal = bits_float((body >> 4) + (224u << 23)) * 0x1.0p-112f;
  const float subnormal = bits_float((body >> 17) | (126u << 23)) - 0.5f;
  const uint32_t is_sub = 0u - static_cast<uint32_t>(body < (1u << 27));  // all ones or zero
  return bits_float(sign | (float_bits(subnormal) & is_sub) | (float_bits(normal) & ~is_sub));
}

// Unaligned little-endian loads: block fields sit at arbitrary byte offsets.
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

struct TypeTraits {
  int64_t block_size;
  int64_t type_size;
  bool supported;
};

TypeTraits traits(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return {1, 4, true};
    case GgmlType::F16: return {1, 2, true};
    case GgmlType::BF16: return {1, 2, true};
    case GgmlType::Q4_0: return {k_qk, 2 + 16, true};
    case GgmlType::Q4_1: return {k_qk, 2 + 2 + 16, true};
    case GgmlType::Q5_0: return {k_qk, 2 + 4 + 16, true};
    case GgmlType::Q5_1: return {k_qk, 2 + 2 + 4 + 16, true};
    case GgmlType::Q8_0: return {k_qk, 2 + 32, true};
    case GgmlType::Q8_1: return {k_qk, 2 + 2 + 32, false};
    case GgmlType::Q2_K: return {k_qk_k, 16 + 64 + 2 + 2, false};
    case GgmlType::Q3_K: return {k_qk_k, 32 + 64 + 12 + 2, false};
    case GgmlType::Q4_K: return {k_qk_k, 2 + 2 + 12 + 128, true};
    case GgmlType::Q5_K: return {k_qk_k, 2 + 2 + 12 + 32 + 128, true};
    case GgmlType::Q6_K: return {k_qk_k, 128 + 64 + 16 + 2, true};
    case GgmlType::Q8_K: return {k_qk_k, 4 + 256 + 2 * 16, false};
  }
  return {0, 0, false};
}

void dequant_f32(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

void dequant_f16(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
}

// bf16 is the top half of an fp32. Building the 32-bit patterns in an integer buffer
// and copying them out lets g++ vectorise the widening (a per-element bit cast did not).
void dequant_bf16(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  constexpr int64_t k_chunk = 256;
  uint32_t bits[k_chunk];
  for (int64_t start = 0; start < n; start += k_chunk) {
    const int64_t m = std::min(k_chunk, n - start);
    for (int64_t i = 0; i < m; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * (start + i), 2);
      bits[i] = static_cast<uint32_t>(h) << 16;
    }
    std::memcpy(dst + start, bits, static_cast<size_t>(m) * 4);
  }
}

// Quantised blocks are read in two steps: unpack_block() turns a block into int8 codes and
// per-group scales (the one reader of each ggml layout), then scale_block() applies
// d * q (+ m). Byte-wide unpacking and a float loop per group both vectorise with g++.

// Low nibbles are elements 0..15, high nibbles 16..31; `bias` is subtracted from each.
inline void unpack_nibbles(const uint8_t* __restrict qs, int bias, int8_t* __restrict q) {
  for (int j = 0; j < 16; ++j) q[j] = static_cast<int8_t>((qs[j] & 0x0F) - bias);
  for (int j = 0; j < 16; ++j) q[j + 16] = static_cast<int8_t>((qs[j] >> 4) - bias);
}

// Spreads the 8 bits of a byte into 8 bytes of 0 or 16 (bit i -> byte i, little-endian).
struct FifthBitTable {
  uint64_t v[256];
  constexpr FifthBitTable() : v() {
    for (int x = 0; x < 256; ++x)
      for (int i = 0; i < 8; ++i)
        if (x & (1 << i)) v[x] |= uint64_t{16} << (8 * i);
  }
};
constexpr FifthBitTable k_fifth_bits;

// Adds the fifth bit of element j (bit j of the little-endian qh) to its nibble, via the
// table above: SSE2 has no per-lane variable shift, so `(qh >> j) & 1` stayed scalar
// and ran at a third of the speed.
inline void add_fifth_bits(const uint8_t* __restrict qh, int bias, int8_t* __restrict q) {
  uint8_t hi[k_qk];
  for (int k = 0; k < 4; ++k) std::memcpy(hi + 8 * k, &k_fifth_bits.v[qh[k]], 8);
  for (int j = 0; j < k_qk; ++j) q[j] = static_cast<int8_t>(q[j] + hi[j] - bias);
}

// Q4_K/Q5_K pack 8 six-bit scales and 8 six-bit mins into 12 bytes: sub-blocks 0-3 use
// the low 6 bits of bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 take their low 4 bits
// from the nibbles of bytes 8-11 and their top 2 bits from the spare top bits of bytes 0-7.
void unpack_k4_scales(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    mn[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

using Add = BlockCodes::Add;

void set_shape(BlockCodes& b, int64_t n, int64_t group, Add add) {
  b.n = n;
  b.group = group;
  b.add = add;
  b.n_sub = 0;
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// The 32-element formats: one scale (and offset) per block.
void unpack_q4_0(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk, k_qk, Add::kZero);
  unpack_nibbles(src + 2, 8, b.q);
  b.d[0] = load_f16(src);
  b.dh = load_u16(src);
}

void unpack_q4_1(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk, k_qk, Add::kMin);
  unpack_nibbles(src + 4, 0, b.q);
  b.d[0] = load_f16(src);
  b.m[0] = load_f16(src + 2);
  b.dh = load_u16(src);
  b.mh = load_u16(src + 2);
}

void unpack_q5_0(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk, k_qk, Add::kZero);
  unpack_nibbles(src + 6, 0, b.q);
  add_fifth_bits(src + 2, 16, b.q);
  b.d[0] = load_f16(src);
  b.dh = load_u16(src);
}

void unpack_q5_1(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk, k_qk, Add::kMin);
  unpack_nibbles(src + 8, 0, b.q);
  add_fifth_bits(src + 4, 0, b.q);
  b.d[0] = load_f16(src);
  b.m[0] = load_f16(src + 2);
  b.dh = load_u16(src);
  b.mh = load_u16(src + 2);
}

void unpack_q8_0(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk, k_qk, Add::kZero);
  std::memcpy(b.q, src + 2, k_qk);
  b.d[0] = load_f16(src);
  b.dh = load_u16(src);
}

// Q4_K: each 64-element chunk c uses 32 bytes of qs: low nibbles are sub-block 2c, high
// nibbles sub-block 2c+1. Q5_K adds a fifth bit: element l of the low half takes bit 2c
// of qh[l], element l of the high half bit 2c+1. Sub-block s is d * sc[s] * q - dmin * mn[s].
template <bool FifthBit>
void unpack_k4(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk_k, 32, Add::kMin);
  const float d = load_f16(src);
  const float dmin = load_f16(src + 2);
  uint8_t sc[8], mn[8];
  unpack_k4_scales(src + 4, sc, mn);
  const uint8_t* qh = src + 16;
  const uint8_t* qs = src + (FifthBit ? 48 : 16);
  for (int c = 0; c < 4; ++c, qs += 32) {
    int8_t* lo = b.q + 64 * c;
    int8_t* hi = lo + 32;
    for (int l = 0; l < 32; ++l) {
      lo[l] = static_cast<int8_t>(qs[l] & 0x0F);
      hi[l] = static_cast<int8_t>(qs[l] >> 4);
      if (FifthBit) {
        lo[l] = static_cast<int8_t>(lo[l] | (((qh[l] >> (2 * c)) & 1) << 4));
        hi[l] = static_cast<int8_t>(hi[l] | (((qh[l] >> (2 * c + 1)) & 1) << 4));
      }
    }
  }
  b.dh = load_u16(src);
  b.mh = load_u16(src + 2);
  b.n_sub = 8;
  for (int s = 0; s < 8; ++s) {
    b.d[s] = d * sc[s];
    b.m[s] = -(dmin * mn[s]);
    b.sub_d[s] = sc[s];
    b.sub_m[s] = mn[s];
  }
}

// Q6_K: two halves of 128 elements, each using 64 bytes of ql and 32 of qh. In a half,
// element l + 32*K (K = 0..3) takes its low 4 bits from ql[l] (K = 0, 2: low / high
// nibble) or ql[l + 32] (K = 1, 3) and its top 2 bits from bits 2K..2K+1 of qh[l]; codes
// are stored minus 32. Element e has the signed 8-bit scale scales[e / 16] (times d).
void unpack_q6_k(const uint8_t* src, BlockCodes& b) {
  set_shape(b, k_qk_k, 16, Add::kNone);
  const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
  const float d = load_f16(src + 208);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = src + 64 * half;
    const uint8_t* qh = src + 128 + 32 * half;
    int8_t* q = b.q + 128 * half;
    for (int K = 0; K < 4; ++K) {
      const uint8_t* lo = ql + (K & 1) * 32;
      const int lo_shift = (K & 2) ? 4 : 0;
      for (int l = 0; l < 32; ++l) {
        const int code = ((lo[l] >> lo_shift) & 0x0F) | (((qh[l] >> (2 * K)) & 3) << 4);
        q[32 * K + l] = static_cast<int8_t>(code - 32);
      }
    }
  }
  b.dh = load_u16(src + 208);
  b.n_sub = 16;
  for (int s = 0; s < 16; ++s) {
    b.d[s] = d * static_cast<float>(sc[s]);
    b.sub_d[s] = sc[s];
  }
}

// dst[i] = d[g] * q[i] (+ 0.0f | + m[g]), g = i / group (see BlockCodes).
void scale_block(const BlockCodes& b, float* __restrict dst) {
  for (int64_t g = 0; g < b.n / b.group; ++g) {
    const int8_t* q = b.q + g * b.group;
    float* y = dst + g * b.group;
    const float d = b.d[g], m = b.add == Add::kMin ? b.m[g] : 0.0f;
    if (b.add == Add::kNone)
      for (int64_t j = 0; j < b.group; ++j) y[j] = d * static_cast<float>(q[j]);
    else
      for (int64_t j = 0; j < b.group; ++j) y[j] = d * static_cast<float>(q[j]) + m;
  }
}

void dequant_blocks(GgmlType t, const uint8_t* src, float* dst, int64_t n_blocks, int64_t type_size) {
  BlockCodes b;
  for (int64_t i = 0; i < n_blocks; ++i, src += type_size) {
    unpack_block(t, src, b);
    scale_block(b, dst);
    dst += b.n;
  }
}

}  // namespace

int64_t ggml_block_size(GgmlType t) {
  const int64_t bs = traits(t).block_size;
  SD_CHECK(bs > 0, "unknown ggml type ", static_cast<uint32_t>(t));
  return bs;
}

int64_t ggml_type_size(GgmlType t) {
  const int64_t ts = traits(t).type_size;
  SD_CHECK(ts > 0, "unknown ggml type ", static_cast<uint32_t>(t));
  return ts;
}

bool ggml_type_supported(GgmlType t) { return traits(t).supported; }

void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  const TypeTraits tr = traits(t);
  SD_CHECK(tr.block_size > 0, "dequantize: unknown ggml type ", static_cast<uint32_t>(t));
  SD_CHECK(tr.supported, "dequantize: ggml type ", ggml_type_name(t),
           " is not supported (supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)");
  SD_CHECK(n >= 0 && n % tr.block_size == 0, "dequantize: ", n, " elements of ", ggml_type_name(t),
           " is not a multiple of the block size ", tr.block_size);
  if (n == 0) return;  // empty tensors are legal; their buffers may be null (memcpy UB)
  const int64_t n_blocks = n / tr.block_size;
  switch (t) {
    case GgmlType::F32: return dequant_f32(src, dst, n);
    case GgmlType::F16: return dequant_f16(src, dst, n);
    case GgmlType::BF16: return dequant_bf16(src, dst, n);
    default: break;
  }
  dequant_blocks(t, src, dst, n_blocks, tr.type_size);
}

bool ggml_type_has_codes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void unpack_block(GgmlType t, const uint8_t* src, BlockCodes& out) {
  switch (t) {
    case GgmlType::Q4_0: return unpack_q4_0(src, out);
    case GgmlType::Q4_1: return unpack_q4_1(src, out);
    case GgmlType::Q5_0: return unpack_q5_0(src, out);
    case GgmlType::Q5_1: return unpack_q5_1(src, out);
    case GgmlType::Q8_0: return unpack_q8_0(src, out);
    case GgmlType::Q4_K: return unpack_k4<false>(src, out);
    case GgmlType::Q5_K: return unpack_k4<true>(src, out);
    case GgmlType::Q6_K: return unpack_q6_k(src, out);
    default: break;
  }
  fail("unpack_block: ggml type ", ggml_type_name(t), " has no integer codes");
}

float fp16_to_fp32(uint16_t h) { return half_to_float(h); }

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00;  // NaN stays a (quiet) NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {
    // Result is a half subnormal (or zero): round abs / 2^-24 to nearest even integer.
    const double scaled = static_cast<double>(bits_float(abs)) * 16777216.0;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((abs >> 23) - 112) << 10 | ((abs >> 13) & 0x3FF);
  const uint32_t rest = abs & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry may bump the exponent: correct
  return sign | static_cast<uint16_t>(h);
}

}  // namespace specdec::io
