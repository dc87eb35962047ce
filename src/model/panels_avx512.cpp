// The panel kernels with AVX-512 intrinsics: AVX-512F for fp32 activations (f32, bf16, f16 and
// the GGUF codes of dtype native), AVX512-VNNI for int8 activations (dtype native_q8). Chosen
// at run time by panels.cpp when the CPU has them; see panels_kernels.h for the interface and
// panels_portable.cpp for the same kernels in plain C++. Compiled only on x86-64, and not at
// all with -DSPECDEC_PORTABLE=ON (then this file is empty and <immintrin.h> is not included).
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): a quantised weight must be
// d * q rounded, then + m rounded, exactly as io::dequantize() computes it.
#include "model/panels_kernels.h"

#if SPECDEC_PANELS_X86

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace specdec::model::panels_detail {

namespace {

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

#define SD_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// acc += the four products u8 x s8 in each 32-bit lane of u and of the 4 bytes at s, broadcast
// to every lane (vpdpbusd with an embedded-broadcast memory operand: no separate broadcast
// instruction per row). Inline assembly because GCC 12 copies an accumulator held in an array
// into another register and back around every _mm512_dpbusd_epi32 (two moves per product,
// half of the 5-row kernel's instructions); "+v" keeps it in its register.
SD_VNNI inline void dpbusd(__m512i& acc, __m512i u, const int8_t* s) {
  using Bytes4 = int32_t __attribute__((may_alias));
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const Bytes4*>(s)));
}

// Bytes ahead of the codes being read that the kernel asks the cache to fetch. With 5 rows
// the kernel computes long enough per cache line that the hardware prefetcher alone fell
// behind: on the Qwen 1.5B, verify(5) 46-49 ms with it against 50-53 ms without (decode
// 34-36 ms in the same runs; 4096 bytes measured the same as 2048).
constexpr int kQ8Prefetch = 2048;

// The sum of xq over a group of G values from k0 in row r (the integer side of the code offset).
template <int G>
inline int32_t group_qsum(const QuantizedRows& xr, int64_t r, int64_t k0) {
  const size_t q = static_cast<size_t>(r * xr.in / 16 + k0 / 16);
  return xr.qsum[q] + (G == 32 ? xr.qsum[q + 1] : 0);
}

// A group's float steps for row r, from its integer dot products d0 (outputs 0-15) and d1
// (16-31) and its scales sc (group_scales): acc += dot * (d * scale) (+ m * sum x), the formula
// of panels_kernels.h, in one order for every int8 kernel of this file.
template <int G, bool Min>
SD_VNNI inline void add_group(__m512 (&acc)[2], __m512i d0, __m512i d1, const __m512 (&sc)[4],
                              const QuantizedRows& xr, int64_t r, int64_t k0) {
  const __m512 xs = _mm512_set1_ps(xr.scale[static_cast<size_t>(r * xr.in / 32 + k0 / 32)]);
  acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_mul_ps(sc[0], xs), acc[0]);
  acc[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_mul_ps(sc[1], xs), acc[1]);
  if constexpr (Min) {
    const size_t q = static_cast<size_t>(r * xr.in / 16 + k0 / 16);
    const __m512 xsb = _mm512_set1_ps(xr.xsum[q] + (G == 32 ? xr.xsum[q + 1] : 0.0f));
    acc[0] = _mm512_fmadd_ps(sc[2], xsb, acc[0]);
    acc[1] = _mm512_fmadd_ps(sc[3], xsb, acc[1]);
  }
}

// y[n, 0..valid) = bias + sum over groups of the formula in panels_kernels.h (QuantizedRows),
// for N <= 5 rows (r0.. of xr). A group's integer dot products start at -C * sum xq, so the
// code offset costs nothing per row.
template <int N, bool Nib, bool Min, bool Sub>
SD_VNNI void panel_rows_q8(const PanelJob& job, const QuantizedRows& xr, int64_t r0, float* y,
                           int64_t y_stride) {
  constexpr int G = kQ8Group<Nib, Min, Sub>, C = kQ8Offset<Nib, Min>;
  constexpr Code kCode = Nib ? Code::kNib4 : Code::kInt8;
  __m512 acc[N][2];
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = _mm512_setzero_ps();
  const int64_t in = job.in;
  for (Q8Groups at(job, G); at.k0 < in; at.next()) {
    const int64_t k0 = at.k0;
    const uint8_t *blk = at.blk, *g = at.g;
    __m512 sc[4];
    group_scales<kCode, Min, Sub>(blk, g, sc);
    const uint8_t* codes = g + job.sub_bytes;
    __m512i dot[N][2];
    for (int n = 0; n < N; ++n) {
      const int32_t qs = C == 0 ? 0 : group_qsum<G>(xr, r0 + n, k0);
      dot[n][0] = dot[n][1] = _mm512_set1_epi32(-C * qs);
    }
#pragma GCC unroll 1  // fully unrolled (G is a constant), BM_PanelsQ8 (now BM_Panels q8:1) ran 7-10 % slower
    for (int k = 0; k < G; k += 4) {
      const uint8_t* step = codes + k * (Nib ? 16 : 32);  // this step's 64 (nib4) or 128 bytes
      _mm_prefetch(reinterpret_cast<const char*>(step + kQ8Prefetch), _MM_HINT_T0);
      if constexpr (!Nib) _mm_prefetch(reinterpret_cast<const char*>(step + 64 + kQ8Prefetch), _MM_HINT_T0);
      __m512i w0, w1;
      if constexpr (Nib) {
        const __m512i v = _mm512_loadu_si512(step);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        w0 = _mm512_and_si512(v, low4);
        w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      } else if constexpr (C == 0) {
        w0 = _mm512_loadu_si512(step);
        w1 = _mm512_loadu_si512(step + 64);
      } else {
        const __m512i top = _mm512_set1_epi8(static_cast<char>(0x80));
        w0 = _mm512_xor_si512(_mm512_loadu_si512(step), top);
        w1 = _mm512_xor_si512(_mm512_loadu_si512(step + 64), top);
      }
      for (int n = 0; n < N; ++n) {
        const int8_t* x4 = xr.xq.data() + (r0 + n) * in + k0 + k;
        dpbusd(dot[n][0], w0, x4);
        dpbusd(dot[n][1], w1, x4);
      }
    }
    for (int n = 0; n < N; ++n) add_group<G, Min>(acc[n], dot[n][0], dot[n][1], sc, xr, r0 + n, k0);
  }
  store_rows<N>(job, acc, y, y_stride);
}

// ---- AMX (prefill) ----------------------------------------------------------------------------
// The int8 kernel above for kAmxRows rows at a time with Intel AMX tiles, for prefills: each
// group's integer dot products of 8 rows x 32 outputs come from two tile multiplies (tdpbsud:
// signed activations x unsigned codes; tdpbssd for the signed int8 codes, which vpdpbusd reads
// with their top bit flipped and the offset C taken back) instead of 128 vpdpbusd. Integer sums
// are exact in any order, and each group's float steps below are panel_rows_q8's, in its order,
// so the outputs are bit for bit that kernel's: a row's result still does not depend on the
// rows beside it. The codes are already tile rows: a k-quad of 16 outputs is 64 bytes, the B
// operand's row (nib4: its low or high nibbles, unpacked per group).
#define SD_AMX __attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8")))

struct TileConfig {  // ldtilecfg's operand, palette 1
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The tile instructions with the tile's number a template argument: GCC's intrinsics paste the
// number into their assembly text, so they take only a literal. "memory": the tiles read and
// write buffers that the code around them writes and reads.
template <int T>
inline void tile_zero() { asm volatile("tilezero %%tmm%c0" ::"i"(T)); }
template <int T>
inline void tile_load(const void* base, int64_t stride) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
}
template <int T>
inline void tile_store(void* base, int64_t stride) {
  asm volatile("tilestored %%tmm%c0, (%1,%2,1)" ::"i"(T), "r"(base), "r"(stride) : "memory");
}
template <int D, int X, int W, bool Signed>  // D += X (signed bytes) . W (signed or unsigned)
inline void tile_dot() {
  if constexpr (Signed)
    asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(D), "i"(X), "i"(W));
  else
    asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(D), "i"(X), "i"(W));
}

// One group's dot products into tiles D0 (outputs 0-15) and D1 (16-31): x through tile X, the
// codes (G/4 rows of 64 bytes a half, `half` bytes apart, rows `stride` apart) through tiles W0
// and W1. Groups alternate between two sets of D0, D1 and X, so that one group's multiplies run
// while the one before is stored.
template <int D0, int D1, int X, int W0, int W1, bool Signed>
inline void tile_dots(const uint8_t* codes, int64_t half, int64_t stride, const int8_t* x, int64_t x_stride) {
  tile_zero<D0>();
  tile_zero<D1>();
  tile_load<X>(x, x_stride);
  tile_load<W0>(codes, stride);
  tile_load<W1>(codes + half, stride);
  tile_dot<D0, X, W0, Signed>();
  tile_dot<D1, X, W1, Signed>();
}

template <int D0, int D1>
inline void store_dots(int32_t (*dots)[32]) {
  tile_store<D0>(&dots[0][0], 128);
  tile_store<D1>(&dots[0][16], 128);
}

// y[n, 0..valid) for rows r0 .. r0+rows-1 of xr (rows: a multiple of kAmxRows), kAmxRows at a
// time. A nib4 panel is unpacked once for all of them (a tile reads bytes): per group, the
// low nibbles (outputs 0-15) as G/4 rows of 64 bytes, then the high ones.
template <bool Nib, bool Min, bool Sub>
SD_AMX void panel_rows_amx(const PanelJob& job, const QuantizedRows& xr, int64_t r0, int64_t rows,
                           float* y, int64_t y_stride) {
  constexpr int G = kQ8Group<Nib, Min, Sub>, C = kQ8Offset<Nib, Min>, N = kAmxRows;
  constexpr bool kSigned = C == 128;     // int8 codes, multiplied as stored
  constexpr int kOff = kSigned ? 0 : C;  // Q4_0's nibbles hold q + 8
  constexpr Code kCode = Nib ? Code::kNib4 : Code::kInt8;
  constexpr int64_t kUnpacked = G / 2 * 64;  // bytes of a nib4 group, unpacked
  const int64_t in = job.in;
  struct alignas(64) Line { uint8_t bytes[64]; };  // a tile row in one cache line
  thread_local std::vector<Line> unpacked_lines;
  const uint8_t* unpacked = nullptr;
  if constexpr (Nib) {
    unpacked_lines.resize(static_cast<size_t>(in / G * kUnpacked / 64));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    Line* dst = unpacked_lines.data();
    for (Q8Groups at(job, G); at.k0 < in; at.next(), dst += kUnpacked / 64)
      for (int q = 0; q < G / 4; ++q) {
        const __m512i v = _mm512_loadu_si512(at.g + job.sub_bytes + 64 * q);
        _mm512_store_si512(dst[q].bytes, _mm512_and_si512(v, low4));
        _mm512_store_si512(dst[G / 4 + q].bytes, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
      }
    unpacked = unpacked_lines.data()->bytes;
  }
  TileConfig cfg;  // two sets: dots 0, 1 / 4, 5 (N x 16 int32), x 2 / 6 (N x G bytes); codes 3, 7
  for (int t : {0, 1, 4, 5}) cfg.rows[t] = N, cfg.colsb[t] = 64;
  for (int t : {2, 6}) cfg.rows[t] = N, cfg.colsb[t] = G;
  for (int t : {3, 7}) cfg.rows[t] = G / 4, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  // A pipeline over the groups: group g's multiplies are issued, group g-1's products stored and
  // group g-2's float steps run, so the tile unit and the vector unit work side by side. Slot
  // g % 4 of the ring holds group g's products and where its scales are.
  alignas(64) int32_t dots[4][N][32];
  const uint8_t* ring_blk[4];
  const uint8_t* ring_grp[4];
  const int64_t n_groups = in / G;
  const int64_t half = Nib ? kUnpacked / 2 : 64, stride = Nib ? 64 : 128;
  for (int64_t rb = r0; rb < r0 + rows; rb += N) {
    __m512 acc[N][2];
    for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = _mm512_setzero_ps();
    const int8_t* x = xr.xq.data() + rb * in;
    Q8Groups at(job, G);
    for (int64_t g = 0; g < n_groups + 2; ++g) {
      if (g < n_groups) {
        ring_blk[g % 4] = at.blk;
        ring_grp[g % 4] = at.g;
        const uint8_t* codes = Nib ? unpacked + g * kUnpacked : at.g + job.sub_bytes;
        if (g % 2 == 0)
          tile_dots<0, 1, 2, 3, 7, kSigned>(codes, half, stride, x + at.k0, in);
        else
          tile_dots<4, 5, 6, 3, 7, kSigned>(codes, half, stride, x + at.k0, in);
        at.next();
      }
      if (g >= 1 && g <= n_groups) {
        if ((g - 1) % 2 == 0)
          store_dots<0, 1>(dots[(g - 1) % 4]);
        else
          store_dots<4, 5>(dots[(g - 1) % 4]);
      }
      if (g < 2) continue;
      const int64_t e = g - 2, k0 = e * G;  // group e's float steps, as panel_rows_q8's
      __m512 sc[4];
      group_scales<kCode, Min, Sub>(ring_blk[e % 4], ring_grp[e % 4], sc);
      for (int n = 0; n < N; ++n) {
        __m512i d0 = _mm512_load_si512(&dots[e % 4][n][0]), d1 = _mm512_load_si512(&dots[e % 4][n][16]);
        if constexpr (kOff != 0) {
          const __m512i off = _mm512_set1_epi32(-kOff * group_qsum<G>(xr, rb + n, k0));
          d0 = _mm512_add_epi32(d0, off);
          d1 = _mm512_add_epi32(d1, off);
        }
        add_group<G, Min>(acc[n], d0, d1, sc, xr, rb + n, k0);
      }
    }
    store_rows<N>(job, acc, y + (rb - r0) * y_stride, y_stride);
  }
  _tile_release();
}

struct MakeAmx {  // q8_kernel_of's tables for panel_rows_amx (one row count: kAmxRows)
  template <bool Nib, bool Min, bool Sub>
  static constexpr std::array<RowsAmxFn, 1> make() { return {panel_rows_amx<Nib, Min, Sub>}; }
};

SPECDEC_PANEL_MAKERS();  // MakeKernels, MakeQ8 over this file's kernels (panels_kernels.h)

}  // namespace

namespace avx512 {

const Kernels& f32_kernels() {
  static const Kernels f32 = MakeKernels::make<Code::kF32, false, 0, false>();
  return f32;
}

const Kernels& kernels(const Segment& s) { return kernels_of<MakeKernels>(s, f32_kernels()); }

// The quantisation of panels_kernels.h (QuantizedRows), 16 values per register.
SD_AVX512 void quantize(const float* x, int64_t blocks, QuantizedRows& xr) {
  const __m512 plus = _mm512_set1_ps(0.5f), minus = _mm512_set1_ps(-0.5f);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 v[2] = {_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16)};
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    xr.scale[static_cast<size_t>(b)] = amax / 127.0f;
    for (int i = 0; i < 2; ++i) {  // the 16-value halves
      const size_t h = static_cast<size_t>(2 * b + i);
      const __m512 t = _mm512_mul_ps(v[i], inv);  // |t| <= 127: round half away from zero
      const __mmask16 ge0 = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_GE_OQ);
      __m512i q = _mm512_cvttps_epi32(_mm512_add_ps(t, _mm512_mask_blend_ps(ge0, minus, plus)));
      q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xr.xq.data() + 16 * h), _mm512_cvtepi32_epi8(q));
      xr.qsum[h] = _mm512_reduce_add_epi32(q);
      // The tree of panels_kernels.h: lanes i + i+8, then i + i+4, i + i+2, i + i+1.
      const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v[i]),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[i]), 1)));
      const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      xr.xsum[h] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
    }
  }
}

// By row count 1..kQ8Rows (more rows go kQ8Rows at a time: a verification of gamma 4 in one pass).
RowsQ8Fn q8_kernel(const Segment& s, int n) { return q8_kernel_of<MakeQ8>(s, n); }

RowsAmxFn amx_kernel(const Segment& s) { return q8_kernel_of<MakeAmx>(s, 0); }

// AMX-TILE and AMX-INT8 (cpuid leaf 7, edx bits 24 and 25), and the kernel's leave to use the
// tiles' 8 KiB of state (Linux 5.16+: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, once for the
// whole process). Asked once; a kernel that refuses leaves the VNNI kernel.
bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return usable;
}

}  // namespace avx512

}  // namespace specdec::model::panels_detail

#endif  // SPECDEC_PANELS_X86
