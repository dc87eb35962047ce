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

#include <immintrin.h>

#include <array>
#include <cstring>

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
    const int64_t h = k0 / 16;  // the group's first 16-value half
    __m512i dot[N][2];
    for (int n = 0; n < N; ++n) {
      const size_t q = static_cast<size_t>((r0 + n) * in / 16 + h);
      const int32_t qs = C == 0 ? 0 : xr.qsum[q] + (G == 32 ? xr.qsum[q + 1] : 0);
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
    for (int n = 0; n < N; ++n) {
      const int64_t r = r0 + n;
      const __m512 xs = _mm512_set1_ps(xr.scale[static_cast<size_t>(r * in / 32 + k0 / 32)]);
      acc[n][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[n][0]), _mm512_mul_ps(sc[0], xs), acc[n][0]);
      acc[n][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[n][1]), _mm512_mul_ps(sc[1], xs), acc[n][1]);
      if constexpr (Min) {
        const size_t q = static_cast<size_t>(r * in / 16 + h);
        const __m512 xsb = _mm512_set1_ps(xr.xsum[q] + (G == 32 ? xr.xsum[q + 1] : 0.0f));
        acc[n][0] = _mm512_fmadd_ps(sc[2], xsb, acc[n][0]);
        acc[n][1] = _mm512_fmadd_ps(sc[3], xsb, acc[n][1]);
      }
    }
  }
  store_rows<N>(job, acc, y, y_stride);
}

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

}  // namespace avx512

}  // namespace specdec::model::panels_detail

#endif  // SPECDEC_PANELS_X86
