// Panel packing and the panel kernel. See panels.h.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): a quantised weight must be
// d * q rounded, then + m rounded, exactly as io::dequantize() computes it. (For GGUF's formats
// d * q is exact, at most 22 significant bits, so today a fused multiply-add would give the
// same bits; the flag keeps the order explicit for any format where it would not.)
#include "model/panels.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "core/error.h"
#include "core/parallel.h"

namespace specdec::model {

namespace {

constexpr int64_t kPanel = 32;  // output features per panel
using Code = PanelWeight::Code;
using Segment = PanelWeight::Segment;
using Add = io::BlockCodes::Add;

// A buffer backed by 2 MiB pages where the kernel allows it (transparent huge pages in
// "madvise" mode, the usual default). Streaming weights through 4 KiB pages costs a TLB miss
// per page and restarts the hardware prefetchers at every page boundary (measured: a few per
// cent, results/engine.md). Not initialised: the packers write every byte, in parallel (the
// first touch, where the kernel zeroes each page, is a large part of the load time).
at::Tensor huge_page_bytes(int64_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (static_cast<size_t>(bytes) < kHuge) return at::empty({bytes}, at::kByte);
  const size_t size = (static_cast<size_t>(bytes) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  SD_CHECK(posix_memalign(&p, kHuge, size) == 0, "panels: cannot allocate ", bytes,
           " bytes of weights");
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP this is ordinary memory
  return at::from_blob(p, {bytes}, [](void* q) { std::free(q); }, at::kByte);
}

int64_t code_bytes_per_k(Code c) {  // bytes of one k's 32 weights
  switch (c) {
    case Code::kF32: return 4 * kPanel;
    case Code::kBF16:
    case Code::kF16: return 2 * kPanel;
    case Code::kNib4: return kPanel / 2;
    case Code::kInt8: return kPanel;
  }
  return 0;
}

bool is_quantised(Code c) { return c == Code::kNib4 || c == Code::kInt8; }

// Byte of the codes of a group that holds code (k, j) (k within the group, output j of the
// panel); a nib4 byte holds outputs j and j + 16 (low / high nibble).
//   exact kernel:   k-major, one k's 32 codes (or 16 bytes of nibbles) after the other
//   int8_dot (q8):  quad-major, for vpdpbusd: per 4 k, output o's 4 codes in bytes 4o..4o+3,
//                   outputs 0-15 in one 64-byte half and 16-31 in the next (int8; nib4 packs
//                   both halves into the nibbles of one 64 bytes)
int64_t code_byte(const Segment& s, int64_t k, int64_t j) {
  const int64_t o = j % 16;
  if (s.code == Code::kNib4)
    return s.int8_dot ? (k / 4) * 64 + 4 * o + k % 4 : k * kPanel / 2 + o;
  return s.int8_dot ? (k / 4) * 128 + (j / 16) * 64 + 4 * o + k % 4 : k * kPanel + j;
}

// groups_per_block and sub only for quantised codes (see Segment).
Segment make_segment(Code code, int64_t group, int64_t groups_per_block, bool sub, Add add,
                     int64_t in, int64_t out0, int64_t out, int64_t panel0) {
  Segment s;
  s.code = code;
  s.add = add;
  s.group = group;
  s.groups_per_block = groups_per_block;
  s.sub = sub;
  s.out0 = out0;
  s.out = out;
  s.panel0 = panel0;
  s.n_panels = (out + kPanel - 1) / kPanel;
  const int64_t halves = s.add == Add::kMin ? 2 : 1;  // D only, or D and M / Dmin
  s.header_bytes = is_quantised(code) ? halves * kPanel * 2 : 0;
  s.sub_bytes = sub ? halves * kPanel : 0;
  s.group_bytes = s.sub_bytes + group * code_bytes_per_k(code);
  s.data = huge_page_bytes(s.n_panels * s.panel_bytes(in));
  return s;
}

// ---- the kernel ------------------------------------------------------------------------------
// GCC 12 flags _mm512_undefined inside its own intrinsic headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define SD_AVX512 __attribute__((target("avx512f")))

// The 32 weights of step k of a group into w0 (outputs 0-15) and w1 (16-31). s: the group's
// scales d (s[0], s[1]) and offsets m (s[2], s[3]). Quantised: w = d * q, then + m (Min).
template <Code C, bool Min, int Off>
SD_AVX512 inline void weights_at(const uint8_t* codes, int64_t k, const __m512* s, __m512& w0,
                                 __m512& w1) {
  if constexpr (C == Code::kF32) {
    const float* p = reinterpret_cast<const float*>(codes) + k * kPanel;
    w0 = _mm512_loadu_ps(p);
    w1 = _mm512_loadu_ps(p + 16);
  } else if constexpr (C == Code::kBF16) {  // a bf16 is the top half of an fp32
    const __m256i* p = reinterpret_cast<const __m256i*>(codes + k * 2 * kPanel);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
    w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p + 1)), 16));
  } else if constexpr (C == Code::kF16) {
    const __m256i* p = reinterpret_cast<const __m256i*>(codes + k * 2 * kPanel);
    w0 = _mm512_cvtph_ps(_mm256_loadu_si256(p));
    w1 = _mm512_cvtph_ps(_mm256_loadu_si256(p + 1));
  } else {
    __m512i i0, i1;
    if constexpr (C == Code::kNib4) {  // byte j: output j in the low nibble, j + 16 in the high
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + k * kPanel / 2));
      const __m128i low4 = _mm_set1_epi8(0x0F);
      i0 = _mm512_cvtepu8_epi32(_mm_and_si128(v, low4));
      i1 = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), low4));
      if constexpr (Off != 0) {
        i0 = _mm512_sub_epi32(i0, _mm512_set1_epi32(Off));
        i1 = _mm512_sub_epi32(i1, _mm512_set1_epi32(Off));
      }
    } else {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k * kPanel));
      i0 = _mm512_cvtepi8_epi32(_mm256_castsi256_si128(v));
      i1 = _mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1));
    }
    w0 = _mm512_mul_ps(s[0], _mm512_cvtepi32_ps(i0));
    w1 = _mm512_mul_ps(s[1], _mm512_cvtepi32_ps(i1));
    if constexpr (Min) {
      w0 = _mm512_add_ps(w0, s[2]);
      w1 = _mm512_add_ps(w1, s[3]);
    }
  }
}

// 16 bytes as 16 fp32 values (signed or unsigned bytes).
template <bool Signed>
SD_AVX512 inline __m512 small_ints(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(Signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

SD_AVX512 inline __m512 negate(__m512 v) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), sign));
}

// A group's scales into s: d (s[0], s[1]: outputs 0-15, 16-31) and, with Min, m (s[2], s[3]),
// from the block header (fp16 D, M / Dmin) and the group's sub-scales: d = D * sc and
// m = -(Dmin * mn) with Sub (sc signed without Min: Q6_K), else d = D and m = M.
template <Code C, bool Min, bool Sub>
SD_AVX512 inline void group_scales(const uint8_t* header, const uint8_t* group, __m512* s) {
  if constexpr (C == Code::kNib4 || C == Code::kInt8) {
    const __m256i* h = reinterpret_cast<const __m256i*>(header);
    s[0] = _mm512_cvtph_ps(_mm256_loadu_si256(h));
    s[1] = _mm512_cvtph_ps(_mm256_loadu_si256(h + 1));
    if constexpr (Min) {
      s[2] = _mm512_cvtph_ps(_mm256_loadu_si256(h + 2));
      s[3] = _mm512_cvtph_ps(_mm256_loadu_si256(h + 3));
    }
    if constexpr (Sub) {
      s[0] = _mm512_mul_ps(s[0], small_ints<!Min>(group));
      s[1] = _mm512_mul_ps(s[1], small_ints<!Min>(group + 16));
      if constexpr (Min) {  // -(Dmin * mn): flip the sign bit, as C++'s unary minus
        s[2] = negate(_mm512_mul_ps(s[2], small_ints<false>(group + 32)));
        s[3] = negate(_mm512_mul_ps(s[3], small_ints<false>(group + 48)));
      }
    }
  }
}

// Where a panel is and what it computes.
struct PanelJob {
  const uint8_t* panel;
  int64_t in, group, groups_per_block, header_bytes, sub_bytes, group_bytes, block_bytes;
  const float* bias;  // at the panel's first output, or null
  int64_t valid;      // outputs of the panel that exist (32 but at a segment's end)
};

// y[n, 0..valid) = acc[n] + bias for N rows: the last step of both kernels.
template <int N>
SD_AVX512 inline void store_rows(const PanelJob& job, const __m512 (&acc)[N][2], float* y,
                                 int64_t y_stride) {
  const auto mask = [](int64_t k) {
    return static_cast<__mmask16>(k >= 16 ? 0xffff : k <= 0 ? 0 : (1u << k) - 1);
  };
  const __mmask16 m0 = mask(job.valid), m1 = mask(job.valid - 16);
  const __m512 b0 = job.bias ? _mm512_maskz_loadu_ps(m0, job.bias) : _mm512_setzero_ps();
  const __m512 b1 = job.bias ? _mm512_maskz_loadu_ps(m1, job.bias + 16) : _mm512_setzero_ps();
  for (int n = 0; n < N; ++n) {
    _mm512_mask_storeu_ps(y + n * y_stride, m0, _mm512_add_ps(acc[n][0], b0));
    _mm512_mask_storeu_ps(y + n * y_stride + 16, m1, _mm512_add_ps(acc[n][1], b1));
  }
}

// y[n, 0..valid) = bias + sum_k x[n, k] w[., k] for N rows; x row stride `in`, y row stride
// y_stride, y at the panel's first output.
template <int N, Code C, bool Min, int Off, bool Sub>
SD_AVX512 void panel_rows(const PanelJob& job, const float* x, float* y, int64_t y_stride) {
  __m512 acc[N][2];
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = _mm512_setzero_ps();
  const int64_t per_block = job.group * job.groups_per_block;
  const uint8_t* blk = job.panel;
  for (int64_t b0 = 0; b0 < job.in; b0 += per_block, blk += job.block_bytes) {
    const uint8_t* g = blk + job.header_bytes;
    for (int64_t k0 = b0; k0 < b0 + per_block; k0 += job.group, g += job.group_bytes) {
      __m512 s[4];
      group_scales<C, Min, Sub>(blk, g, s);
      const uint8_t* codes = g + job.sub_bytes;
      const float* xk = x + k0;
      for (int64_t k = 0; k < job.group; ++k) {
        __m512 w0, w1;
        weights_at<C, Min, Off>(codes, k, s, w0, w1);
        for (int n = 0; n < N; ++n) {
          const __m512 xb = _mm512_set1_ps(xk[n * job.in + k]);
          acc[n][0] = _mm512_fmadd_ps(w0, xb, acc[n][0]);
          acc[n][1] = _mm512_fmadd_ps(w1, xb, acc[n][1]);
        }
      }
    }
  }
  store_rows<N>(job, acc, y, y_stride);
}

// The panel's weights as fp32 [in][32] (the layout of a kF32 panel).
template <Code C, bool Min, int Off, bool Sub>
SD_AVX512 void decode_panel(const PanelJob& job, float* out) {
  const int64_t per_block = job.group * job.groups_per_block;
  const uint8_t* blk = job.panel;
  for (int64_t b0 = 0; b0 < job.in; b0 += per_block, blk += job.block_bytes) {
    const uint8_t* g = blk + job.header_bytes;
    for (int64_t k0 = b0; k0 < b0 + per_block; k0 += job.group, g += job.group_bytes) {
      __m512 s[4];
      group_scales<C, Min, Sub>(blk, g, s);
      for (int64_t k = 0; k < job.group; ++k) {
        __m512 w0, w1;
        weights_at<C, Min, Off>(g + job.sub_bytes, k, s, w0, w1);
        _mm512_storeu_ps(out + (k0 + k) * kPanel, w0);
        _mm512_storeu_ps(out + (k0 + k) * kPanel + 16, w1);
      }
    }
  }
}

using RowsFn = void (*)(const PanelJob&, const float*, float*, int64_t);
using DecodeFn = void (*)(const PanelJob&, float*);

struct Kernels {
  RowsFn rows[9];  // by row count 1..8
  DecodeFn decode;
};

template <Code C, bool Min, int Off, bool Sub>
constexpr Kernels kernels_for() {
  return {{nullptr, panel_rows<1, C, Min, Off, Sub>, panel_rows<2, C, Min, Off, Sub>,
           panel_rows<3, C, Min, Off, Sub>, panel_rows<4, C, Min, Off, Sub>,
           panel_rows<5, C, Min, Off, Sub>, panel_rows<6, C, Min, Off, Sub>,
           panel_rows<7, C, Min, Off, Sub>, panel_rows<8, C, Min, Off, Sub>},
          decode_panel<C, Min, Off, Sub>};
}

const Kernels& f32_kernels() {
  static const Kernels f32 = kernels_for<Code::kF32, false, 0, false>();
  return f32;
}

// The instantiations a segment can need (see from_blocks): nib4 for Q4_0 (offset 8), Q4_1
// (+ M) and Q4_K (sub-scales, - Dmin * mn); int8 for Q5_0 / Q8_0, Q5_1 (+ M), Q5_K
// (sub-scales, - Dmin * mn) and Q6_K (signed sub-scales).
const Kernels& kernels(const Segment& s) {
  static const Kernels bf16 = kernels_for<Code::kBF16, false, 0, false>();
  static const Kernels f16 = kernels_for<Code::kF16, false, 0, false>();
  static const Kernels q4_0 = kernels_for<Code::kNib4, false, 8, false>();
  static const Kernels q4_1 = kernels_for<Code::kNib4, true, 0, false>();
  static const Kernels q4_k = kernels_for<Code::kNib4, true, 0, true>();
  static const Kernels q8_0 = kernels_for<Code::kInt8, false, 0, false>();
  static const Kernels q5_1 = kernels_for<Code::kInt8, true, 0, false>();
  static const Kernels q5_k = kernels_for<Code::kInt8, true, 0, true>();
  static const Kernels q6_k = kernels_for<Code::kInt8, false, 0, true>();
  const bool min = s.add == Add::kMin;
  switch (s.code) {
    case Code::kF32: return f32_kernels();
    case Code::kBF16: return bf16;
    case Code::kF16: return f16;
    case Code::kNib4: return s.sub ? q4_k : min ? q4_1 : q4_0;
    case Code::kInt8: return s.sub ? (min ? q5_k : q6_k) : min ? q5_1 : q8_0;
  }
  fail("panels: unknown code");
}

// ---- int8 activations (dtype native_q8) -------------------------------------------------------
// Each row of x is quantised per 32 values: scale = max|x| / 127, xq = round(x * 127 / max|x|). Sums
// per 16 values of xq (integers) and of x (fp32) serve the code offset and the "+ m" term:
//   sum_k (d q_k + m) x_k  ~=  d * scale * sum_k q_k xq_k  +  m * sum_k x_k
// where q = u - C for the unsigned byte u vpdpbusd reads (nib4: C = the offset; int8 codes are
// made unsigned by flipping the top bit: C = 128), so sum q xq = sum u xq - C * sum xq.
struct QuantizedRows {
  int64_t in = 0;
  std::vector<int8_t> xq;      // [N, in]
  std::vector<float> scale;    // [N, in / 32]
  std::vector<int32_t> qsum;   // [N, in / 16]  sum of xq
  std::vector<float> xsum;     // [N, in / 16]  sum of x

  QuantizedRows(const float* x, int64_t n, int64_t in_) : in(in_) {
    xq.resize(static_cast<size_t>(n * in));
    scale.resize(static_cast<size_t>(n * in / 32));
    qsum.resize(static_cast<size_t>(n * in / 16));
    xsum.resize(static_cast<size_t>(n * in / 16));
    for (int64_t b = 0; b < n * in / 32; ++b) {
      const float* v = x + 32 * b;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      scale[static_cast<size_t>(b)] = d;
      for (int h = 0; h < 2; ++h) {
        int32_t qs = 0;
        float xs = 0;
        for (int i = 16 * h; i < 16 * h + 16; ++i) {
          const float t = v[i] * inv;  // |t| <= 127: round half away from zero, as roundf
          const int q = static_cast<int>(t + (t >= 0 ? 0.5f : -0.5f));
          xq[static_cast<size_t>(32 * b + i)] = static_cast<int8_t>(std::clamp(q, -127, 127));
          qs += xq[static_cast<size_t>(32 * b + i)];
          xs += v[i];
        }
        qsum[static_cast<size_t>(2 * b + h)] = qs;
        xsum[static_cast<size_t>(2 * b + h)] = xs;
      }
    }
  }
};

#define SD_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// y[n, 0..valid) = bias + sum over groups of the formula above, for N <= 5 rows (r0.. of xr).
template <int N, bool Nib, bool Min, bool Sub>
SD_VNNI void panel_rows_q8(const PanelJob& job, int offset, const QuantizedRows& xr, int64_t r0,
                           float* y, int64_t y_stride) {
  __m512 acc[N][2];
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = _mm512_setzero_ps();
  const int64_t in = job.in, G = job.group;
  const int C = Nib ? offset : 128;
  constexpr Code kCode = Nib ? Code::kNib4 : Code::kInt8;
  const int64_t per_block = G * job.groups_per_block;
  const uint8_t* blk = job.panel;
  const uint8_t* g = blk + job.header_bytes;
  for (int64_t k0 = 0; k0 < in; k0 += G, g += job.group_bytes) {
    if (k0 > 0 && k0 % per_block == 0) {  // the next block: its header, then its groups
      blk += job.block_bytes;
      g = blk + job.header_bytes;
    }
    __m512 sc[4];
    group_scales<kCode, Min, Sub>(blk, g, sc);
    const uint8_t* codes = g + job.sub_bytes;
    __m512i dot[N][2];
    for (int n = 0; n < N; ++n) dot[n][0] = dot[n][1] = _mm512_setzero_si512();
    for (int64_t k = 0; k < G; k += 4) {
      __m512i w0, w1;
      if constexpr (Nib) {
        const __m512i v = _mm512_loadu_si512(codes + k * 16);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        w0 = _mm512_and_si512(v, low4);
        w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      } else {
        const __m512i top = _mm512_set1_epi8(static_cast<char>(0x80));
        w0 = _mm512_xor_si512(_mm512_loadu_si512(codes + k * 32), top);
        w1 = _mm512_xor_si512(_mm512_loadu_si512(codes + k * 32 + 64), top);
      }
      for (int n = 0; n < N; ++n) {
        int32_t x4;
        std::memcpy(&x4, xr.xq.data() + (r0 + n) * in + k0 + k, 4);
        const __m512i xb = _mm512_set1_epi32(x4);
        dot[n][0] = _mm512_dpbusd_epi32(dot[n][0], w0, xb);
        dot[n][1] = _mm512_dpbusd_epi32(dot[n][1], w1, xb);
      }
    }
    const __m512 d0 = sc[0], d1 = sc[1];
    for (int n = 0; n < N; ++n) {
      const int64_t r = r0 + n, h = k0 / 16;
      const int32_t qs = xr.qsum[static_cast<size_t>(r * in / 16 + h)] +
                         (G == 32 ? xr.qsum[static_cast<size_t>(r * in / 16 + h + 1)] : 0);
      const __m512i corr = _mm512_set1_epi32(C * qs);
      const __m512 xs = _mm512_set1_ps(xr.scale[static_cast<size_t>(r * in / 32 + k0 / 32)]);
      acc[n][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[n][0], corr)), _mm512_mul_ps(d0, xs), acc[n][0]);
      acc[n][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[n][1], corr)), _mm512_mul_ps(d1, xs), acc[n][1]);
      if constexpr (Min) {
        const float x_sum = xr.xsum[static_cast<size_t>(r * in / 16 + h)] +
                            (G == 32 ? xr.xsum[static_cast<size_t>(r * in / 16 + h + 1)] : 0.0f);
        const __m512 xsb = _mm512_set1_ps(x_sum);
        acc[n][0] = _mm512_fmadd_ps(sc[2], xsb, acc[n][0]);
        acc[n][1] = _mm512_fmadd_ps(sc[3], xsb, acc[n][1]);
      }
    }
  }
  store_rows<N>(job, acc, y, y_stride);
}

using RowsQ8Fn = void (*)(const PanelJob&, int, const QuantizedRows&, int64_t, float*, int64_t);
constexpr int kQ8Rows = 5;  // rows per pass of the int8 kernel

template <bool Nib, bool Min, bool Sub>
constexpr std::array<RowsQ8Fn, kQ8Rows + 1> q8_kernels_for() {
  return {nullptr, panel_rows_q8<1, Nib, Min, Sub>, panel_rows_q8<2, Nib, Min, Sub>,
          panel_rows_q8<3, Nib, Min, Sub>, panel_rows_q8<4, Nib, Min, Sub>,
          panel_rows_q8<5, Nib, Min, Sub>};
}

// By row count 1..5 (more rows go 5 at a time: a verification of gamma 4 in one pass; 8 rows
// would need more than the 32 vector registers for their int and float accumulators).
RowsQ8Fn q8_kernel(const Segment& s, int n) {
  static const auto q4_0 = q8_kernels_for<true, false, false>(), q4_1 = q8_kernels_for<true, true, false>();
  static const auto q4_k = q8_kernels_for<true, true, true>(), q8_0 = q8_kernels_for<false, false, false>();
  static const auto q5_1 = q8_kernels_for<false, true, false>(), q5_k = q8_kernels_for<false, true, true>();
  static const auto q6_k = q8_kernels_for<false, false, true>();
  const bool min = s.add == Add::kMin;
  const auto& table = s.code == Code::kNib4 ? (s.sub ? q4_k : min ? q4_1 : q4_0)
                                            : (s.sub ? (min ? q5_k : q6_k) : min ? q5_1 : q8_0);
  return table[static_cast<size_t>(n)];
}

}  // namespace

bool panels_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

bool panels_int8_dot_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

int64_t rope_hf_row(int64_t row, int64_t out, int64_t n_heads) {
  const int64_t hd = out / n_heads, half = hd / 2;
  const int64_t h = row / hd, r = row % hd;
  return h * hd + (r % 2) * half + r / 2;
}

// ---- packing ---------------------------------------------------------------------------------

PanelWeight PanelWeight::from_tensor(const at::Tensor& w_in, at::ScalarType dtype) {
  SD_CHECK(w_in.defined() && w_in.dim() == 2 && w_in.size(0) > 0 && w_in.size(1) > 0,
           "panels: weight must be a non-empty 2-D [out, in] tensor");
  SD_CHECK(dtype == at::kFloat || dtype == at::kBFloat16,
           "panels: dtype must be float32 or bfloat16, got ", dtype);
  PanelWeight pw;
  pw.out_ = w_in.size(0);
  pw.in_ = w_in.size(1);
  pw.tensor_dtype_ = dtype;
  const Code code = dtype == at::kFloat ? Code::kF32 : Code::kBF16;
  Segment s = make_segment(code, pw.in_, 1, false, Add::kNone, pw.in_, 0, pw.out_, 0);
  s.type = dtype == at::kFloat ? io::GgmlType::F32 : io::GgmlType::BF16;
  // [out, in] -> [n_panels, in, 32], zero-padded past `out`.
  const at::Tensor w = w_in.to(dtype).contiguous();
  at::Tensor padded = at::zeros({s.n_panels * kPanel, pw.in_}, w.options());
  padded.narrow(0, 0, pw.out_).copy_(w);
  // Copied by ATen's threads (the loader gives them all cores).
  at::from_blob(s.data.data_ptr(), {s.n_panels, pw.in_, kPanel}, w.options())
      .copy_(padded.view({s.n_panels, kPanel, pw.in_}).transpose(1, 2));
  pw.n_panels_ = s.n_panels;
  pw.segs_.push_back(std::move(s));
  return pw;
}

namespace {

// One part into its segment. Panel by panel (in parallel): the 32 rows' blocks are unpacked
// side by side (io::unpack_block), then written k-major, so the panel is written in order.
void pack_part(const QuantBlocks& part, Segment& s, int64_t in) {
  const io::GgmlType t = part.type;
  const int64_t bs = io::ggml_block_size(t), ts = io::ggml_type_size(t);
  const int64_t row_bytes = in / bs * ts;
  const int64_t panel_bytes = s.panel_bytes(in);
  uint8_t* base = static_cast<uint8_t*>(s.data.data_ptr());
  // GGUF row of HF output o.
  std::vector<int64_t> src_row(static_cast<size_t>(part.out));
  for (int64_t r = 0; r < part.out; ++r)
    src_row[static_cast<size_t>(part.rope_heads > 0 ? rope_hf_row(r, part.out, part.rope_heads) : r)] = r;
  const auto row_of = [&](int64_t p, int64_t j) {
    return part.data + src_row[static_cast<size_t>(p * kPanel + j)] * row_bytes;
  };
  parallel::parallel_for(s.n_panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<io::BlockCodes> rows(kPanel);
    for (int64_t p = p0; p < p1; ++p) {
      uint8_t* panel = base + p * panel_bytes;
      const int64_t valid = std::min(kPanel, part.out - p * kPanel);
      std::memset(panel, 0, static_cast<size_t>(panel_bytes));  // padding outputs stay 0
      if (!is_quantised(s.code)) {  // F32, F16, BF16: the source's own bits, transposed
        const int64_t size = code_bytes_per_k(s.code) / kPanel;
        for (int64_t j = 0; j < valid; ++j)
          for (int64_t k = 0; k < in; ++k)
            std::memcpy(panel + (k * kPanel + j) * size, row_of(p, j) + k * size, static_cast<size_t>(size));
        continue;
      }
      for (int64_t j = valid; j < kPanel; ++j) {  // absent outputs: weight 0 (scales 0)
        io::BlockCodes& r = rows[j];
        std::fill(std::begin(r.q), std::end(r.q), static_cast<int8_t>(-s.offset));
        r.dh = r.mh = 0;
        std::fill(std::begin(r.sub_d), std::end(r.sub_d), int16_t{0});
        std::fill(std::begin(r.sub_m), std::end(r.sub_m), int16_t{0});
      }
      const bool min = s.add == Add::kMin;
      for (int64_t blk = 0; blk < in / bs; ++blk) {
        for (int64_t j = 0; j < valid; ++j) io::unpack_block(t, row_of(p, j) + blk * ts, rows[j]);
        uint8_t* block = panel + blk * s.block_bytes();  // a GGUF block is a panel block
        uint16_t* header = reinterpret_cast<uint16_t*>(block);
        for (int64_t j = 0; j < kPanel; ++j) {
          header[j] = rows[j].dh;
          if (min) header[kPanel + j] = rows[j].mh;
        }
        for (int64_t g = 0; g < s.groups_per_block; ++g) {
          uint8_t* group = block + s.header_bytes + g * s.group_bytes;
          for (int64_t j = 0; s.sub && j < kPanel; ++j) {
            group[j] = static_cast<uint8_t>(rows[j].sub_d[g]);  // Q6_K: the signed byte
            if (min) group[kPanel + j] = static_cast<uint8_t>(rows[j].sub_m[g]);
          }
          uint8_t* codes = group + s.sub_bytes;
          for (int64_t k = 0; k < s.group; ++k) {
            const int64_t e = g * s.group + k;  // element of the block
            if (s.code == Code::kInt8) {
              for (int64_t j = 0; j < kPanel; ++j) codes[code_byte(s, k, j)] = static_cast<uint8_t>(rows[j].q[e]);
            } else {  // output j in the low nibble, j + 16 in the high
              for (int64_t j = 0; j < kPanel / 2; ++j)
                codes[code_byte(s, k, j)] = static_cast<uint8_t>((rows[j].q[e] + s.offset) |
                                                                 ((rows[j + 16].q[e] + s.offset) << 4));
            }
          }
        }
      }
    }
  });
  if (part.file_mapped) {  // the pages wholly inside the tensor: nothing else lives there
    const uintptr_t page = 4096, begin = reinterpret_cast<uintptr_t>(part.data);
    const uintptr_t end = begin + static_cast<uintptr_t>(part.out * row_bytes);
    const uintptr_t b = (begin + page - 1) / page * page, e = end / page * page;
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
  }
}

}  // namespace

PanelWeight PanelWeight::from_blocks(const std::vector<QuantBlocks>& parts, bool int8_dot) {
  SD_CHECK(!int8_dot || panels_int8_dot_supported(),
           "panels: int8 activations (dtype native_q8) need AVX512-VNNI, which this CPU lacks");
  SD_CHECK(!parts.empty(), "panels: no tensors to pack");
  PanelWeight pw;
  pw.native_ = true;
  pw.in_ = parts.front().in;
  for (const QuantBlocks& part : parts) {
    using io::GgmlType;
    const GgmlType t = part.type;
    SD_CHECK(part.defined() && part.out > 0 && part.in > 0, "panels: tensor ", part.name,
             " is empty");
    SD_CHECK(part.in == pw.in_, "panels: tensor ", part.name, " has ", part.in,
             " columns, the tensors stacked with it ", pw.in_);
    SD_CHECK(io::ggml_type_supported(t), "tensor ", part.name, ": ggml type ",
             io::ggml_type_name(t),
             " cannot be kept native (supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)");
    SD_CHECK(part.in % io::ggml_block_size(t) == 0, "tensor ", part.name, ": ", part.in,
             " columns is not a multiple of the ", io::ggml_type_name(t), " block size ",
             io::ggml_block_size(t));
    SD_CHECK(part.rope_heads <= 0 || part.out % (2 * part.rope_heads) == 0, "tensor ", part.name,
             ": ", part.out, " rows are not ", part.rope_heads, " heads x an even head_dim");
    Segment s;
    if (io::ggml_type_has_codes(t)) {
      io::BlockCodes b;
      io::unpack_block(t, part.data, b);  // the group and the add rule are the type's
      const bool nib4 = t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q4_K;
      s = make_segment(nib4 ? Code::kNib4 : Code::kInt8, b.group, b.n / b.group, b.n_sub > 0,
                       b.add, pw.in_, pw.out_, part.out, pw.n_panels_);
      s.offset = t == GgmlType::Q4_0 ? 8 : 0;
      s.int8_dot = int8_dot;
    } else {
      const Code code = t == GgmlType::F16 ? Code::kF16 : t == GgmlType::BF16 ? Code::kBF16 : Code::kF32;
      s = make_segment(code, pw.in_, 1, false, Add::kNone, pw.in_, pw.out_, part.out, pw.n_panels_);
    }
    s.type = t;
    pack_part(part, s, pw.in_);
    pw.out_ += s.out;
    pw.n_panels_ += s.n_panels;
    pw.segs_.push_back(std::move(s));
  }
  return pw;
}

// ---- use -------------------------------------------------------------------------------------

int64_t PanelWeight::bytes() const {
  int64_t n = 0;
  for (const Segment& s : segs_) n += s.data.numel();
  return n;
}

std::string PanelWeight::describe() const {
  if (!native_) return tensor_dtype_ == at::kFloat ? "f32" : "bf16";
  std::string out;
  std::set<std::string> seen;
  bool q8 = false;
  for (const Segment& s : segs_) {
    const std::string name = io::ggml_type_name(s.type);
    if (seen.insert(name).second) out += (out.empty() ? "" : "+") + name;
    q8 = q8 || s.int8_dot;
  }
  return q8 ? out + "/q8" : out;
}

const PanelWeight::Segment& PanelWeight::segment_of_panel(int64_t p) const {
  for (const Segment& s : segs_)
    if (p < s.panel0 + s.n_panels) return s;
  fail("panels: panel ", p, " out of range");
}

const PanelWeight::Segment& PanelWeight::segment_of_output(int64_t o) const {
  for (const Segment& s : segs_)
    if (o < s.out0 + s.out) return s;
  fail("panels: output ", o, " out of range");
}

void PanelWeight::decode_row(int64_t o, float* dst) const {
  const Segment& s = segment_of_output(o);
  const int64_t lo = o - s.out0, j = lo % kPanel;
  const uint8_t* panel = static_cast<const uint8_t*>(s.data.data_ptr()) + lo / kPanel * s.panel_bytes(in_);
  const bool min = s.add == Add::kMin;
  for (int64_t k0 = 0; k0 < in_; k0 += s.group) {
    const int64_t gi = k0 / s.group;  // group index in the panel
    const uint8_t* block = panel + gi / s.groups_per_block * s.block_bytes();
    const uint8_t* g = block + s.header_bytes + gi % s.groups_per_block * s.group_bytes;
    const uint8_t* codes = g + s.sub_bytes;
    float d = 0, m = 0;  // as io::BlockCodes
    if (is_quantised(s.code)) {
      uint16_t dh, mh = 0;
      std::memcpy(&dh, block + 2 * j, 2);
      if (min) std::memcpy(&mh, block + 2 * (kPanel + j), 2);
      d = io::fp16_to_fp32(dh);
      m = io::fp16_to_fp32(mh);
      if (s.sub) {
        d = d * static_cast<float>(min ? static_cast<int>(g[j]) : static_cast<int8_t>(g[j]));
        m = -(m * static_cast<float>(g[kPanel + j]));
      }
    }
    for (int64_t k = 0; k < s.group; ++k) {
      float v = 0;
      switch (s.code) {
        case Code::kF32: std::memcpy(&v, codes + 4 * (k * kPanel + j), 4); break;
        case Code::kBF16:
        case Code::kF16: {
          uint16_t h;
          std::memcpy(&h, codes + 2 * (k * kPanel + j), 2);
          v = s.code == Code::kBF16 ? io::bf16_to_fp32(h) : io::fp16_to_fp32(h);
          break;
        }
        case Code::kNib4:
        case Code::kInt8: {
          const uint8_t byte = codes[code_byte(s, k, j)];
          const int q = s.code == Code::kInt8 ? static_cast<int8_t>(byte)
                                              : (j < 16 ? byte & 0x0F : byte >> 4) - s.offset;
          v = d * static_cast<float>(q);  // the order of io::BlockCodes
          if (s.add == Add::kZero) v = v + 0.0f;
          if (s.add == Add::kMin) v = v + m;
          break;
        }
      }
      dst[k0 + k] = v;
    }
  }
}

at::Tensor PanelWeight::rows(const at::Tensor& ids_in) const {
  const at::Tensor ids = ids_in.to(at::kLong).contiguous();
  const int64_t n = ids.numel();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    SD_CHECK(id[i] >= 0 && id[i] < out_, "panels: row ", id[i], " out of range [0, ", out_, ")");
  at::Tensor out = at::empty({n, in_}, at::kFloat);
  for (int64_t i = 0; i < n; ++i) decode_row(id[i], out.data_ptr<float>() + i * in_);
  return out;
}

at::Tensor PanelWeight::dequantized() const {
  at::Tensor out = at::empty({out_, in_}, at::kFloat);
  parallel::parallel_for(out_, 64, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) decode_row(o, out.data_ptr<float>() + o * in_);
  });
  return out;
}

at::Tensor PanelWeight::forward(const at::Tensor& x, const at::Tensor& b) const {
  SD_CHECK(defined(), "panels: forward on an empty weight");
  SD_CHECK(panels_supported(), "panels: the panel kernel needs AVX-512F, which this CPU lacks");
  const int64_t n_rows = x.size(0);
  at::Tensor y = at::empty({n_rows, out_}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Chunks of at least ~64 KiB of weights (a thread hand-off is amortised) and about 8 per
  // thread: enough that a thread the OS deschedules leaves only a small share to the others,
  // few enough that claiming chunks costs nothing measurable (one panel per chunk was ~3 % of
  // a SmolLM2 step) and each thread streams several consecutive panels.
  const int64_t min_grain = std::max<int64_t>(1, 65536 * n_panels_ / std::max<int64_t>(1, bytes()));
  const int64_t per_chunk = (n_panels_ + 8 * parallel::num_threads() - 1) / (8 * parallel::num_threads());
  std::unique_ptr<QuantizedRows> xr;  // int8 rows, once per call, when a segment needs them
  for (const Segment& s : segs_)
    if (s.int8_dot && !xr) xr = std::make_unique<QuantizedRows>(xp, n_rows, in_);
  parallel::parallel_for(n_panels_, std::max(min_grain, per_chunk), [&](int64_t p0, int64_t p1) {
    // Prefill: a quantised panel is decoded once into an fp32 panel (in L2) that all row
    // groups then read, instead of being decoded again for every 8 rows.
    thread_local std::vector<float> decoded;
    for (int64_t p = p0; p < p1; ++p) {
      const Segment& s = segment_of_panel(p);
      const int64_t lp = p - s.panel0, o0 = s.out0 + lp * kPanel;
      PanelJob job{static_cast<const uint8_t*>(s.data.data_ptr()) + lp * s.panel_bytes(in_),
                   in_, s.group, s.groups_per_block, s.header_bytes, s.sub_bytes, s.group_bytes,
                   s.block_bytes(), bp ? bp + o0 : nullptr, std::min(kPanel, s.out0 + s.out - o0)};
      if (s.int8_dot) {
        for (int64_t r = 0; r < n_rows; r += kQ8Rows) {
          const int n = static_cast<int>(std::min<int64_t>(kQ8Rows, n_rows - r));
          q8_kernel(s, n)(job, s.offset, *xr, r, yp + r * out_ + o0, out_);
        }
        continue;
      }
      const Kernels* k = &kernels(s);
      if (n_rows > 8 && is_quantised(s.code)) {
        decoded.resize(static_cast<size_t>(in_ * kPanel));
        k->decode(job, decoded.data());
        job = PanelJob{reinterpret_cast<const uint8_t*>(decoded.data()), in_, in_, 1, 0, 0,
                       in_ * 4 * kPanel, in_ * 4 * kPanel, job.bias, job.valid};
        k = &f32_kernels();
      }
      for (int64_t r = 0; r < n_rows; r += 8) {
        const int n = static_cast<int>(std::min<int64_t>(8, n_rows - r));
        k->rows[n](job, xp + r * in_, yp + r * out_ + o0, out_);
      }
    }
  });
  return y;
}

}  // namespace specdec::model
