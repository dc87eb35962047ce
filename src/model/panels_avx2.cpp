// The panel kernels with AVX2 intrinsics, for x86-64 CPUs with AVX2, FMA and F16C but without
// AVX-512: both kernel sets of panels_avx512.cpp, with results equal to that file's bit for bit.
//
// fp32 activations (f32, bf16, f16 and the GGUF codes of dtype native): each output is one
// chain of fused multiply-adds over k = 0 .. in-1 and a quantised weight is d * q, then + m, as
// there; a lane computes one output whatever the register's width, so 8 outputs a register
// give the 16-lane kernel's bits. A pass holds N rows x V registers of accumulators in the 16
// ymm registers (V = 4 up to 3 rows, 2 up to 6, else 1), and a panel takes 4 / V passes.
//
// int8 activations (dtype native_q8, and the q4_1 draft), where AVX512-VNNI is missing: the
// integer dot products are exact in any order, and the float steps are the VNNI kernel's, in
// the same order, with the same fused multiply-adds. panels_kernels.h has the formula;
// tests/unit/test_model_panels.cpp checks both sets against the other two implementations.
// vpdpbusd's four u8 x s8 products a lane become vpmaddubsw (pairs, into int16) and vpmaddwd
// with ones (into int32). vpmaddubsw saturates a pair's sum at 32767, which two codes of 255
// times 127 would pass, so the signed codes (Q5_0, Q8_0, Q6_K: stored as signed bytes q, which
// the VNNI kernel reads as u = q + 128, offset C = 128) are multiplied as |q| times x with q's
// sign (vpsignb): at most 2 * 128 * 127 = 32512. Their dot product is then sum q x directly,
// which is what the VNNI kernel's sum u x - C sum x comes to. Unsigned
// codes are at most 31 (Q5_1, Q5_K) or 15 (nibbles): 2 * 31 * 127 cannot saturate.
//
// Compiled only on x86-64, and not at all with -DSPECDEC_PORTABLE=ON; -ffp-contract=off as the
// other kernels (CMakeLists.txt). Only this file's functions carry the AVX2 target, through
// attributes, so no inline function of a shared header is compiled for AVX2 here.
#include "model/panels_kernels.h"

#if SPECDEC_PANELS_X86

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"

namespace specdec::model::panels_detail {

namespace {

#define SD_AVX2 __attribute__((target("avx2,fma,f16c")))

// 8 bytes as 8 fp32 values (signed or unsigned bytes).
template <bool Signed>
SD_AVX2 inline __m256 small_ints(const uint8_t* p) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(Signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
}

SD_AVX2 inline __m256 negate(__m256 v) {
  return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u))));
}

// A group's scales: d (s[0..3], 8 outputs each) and, with Min, m (s[4..7]), as the AVX-512
// kernel's group_scales: d = D * sc and m = -(Dmin * mn) with Sub, else d = D and m = M.
template <bool Min, bool Sub>
SD_AVX2 inline void group_scales(const uint8_t* header, const uint8_t* group, __m256* s) {
  for (int i = 0; i < (Min ? 8 : 4); ++i)
    s[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(header) + i));
  if constexpr (Sub) {
    for (int i = 0; i < 4; ++i) s[i] = _mm256_mul_ps(s[i], small_ints<!Min>(group + 8 * i));
    if constexpr (Min)
      for (int i = 0; i < 4; ++i) s[4 + i] = negate(_mm256_mul_ps(s[4 + i], small_ints<false>(group + 32 + 8 * i)));
  }
}

// y[n, j] = acc[n] + bias for outputs j = 8 v0 .. 8 (v0 + V) - 1 below job.valid: the last step
// of both kernels.
template <int N, int V>
SD_AVX2 inline void store_rows(const PanelJob& job, const __m256 (&acc)[N][V], float* y, int64_t y_stride, int v0) {
  const int64_t j0 = 8 * v0, j1 = std::min<int64_t>(job.valid, 8 * (v0 + V));
  for (int n = 0; n < N; ++n) {
    alignas(32) float out[8 * V];
    for (int i = 0; i < V; ++i) _mm256_store_ps(out + 8 * i, acc[n][i]);
    for (int64_t j = j0; j < j1; ++j) y[n * y_stride + j] = out[j - j0] + (job.bias ? job.bias[j] : 0.0f);
  }
}

// ---- fp32 activations -------------------------------------------------------------------------
// The 8 weights of outputs 8v .. 8v+7 at step k of a group. s: the group's scales d (s[0..3])
// and offsets m (s[4..7]), 8 outputs each. Quantised: w = d * q, then + m (Min).
template <Code C, bool Min, int Off>
SD_AVX2 inline __m256 weights8(const uint8_t* codes, int64_t k, int v, const __m256* s) {
  if constexpr (C == Code::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(codes) + k * kPanel + 8 * v);
  } else if constexpr (C == Code::kBF16 || C == Code::kF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + k * 2 * kPanel + 16 * v));
    if constexpr (C == Code::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // a bf16 is an fp32's top half
  } else {
    __m256i q;
    if constexpr (C == Code::kNib4) {  // byte j: output j in the low nibble, j + 16 in the high
      const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(codes + k * kPanel / 2 + 8 * (v % 2))));
      q = v < 2 ? _mm256_and_si256(b, _mm256_set1_epi32(0x0F)) : _mm256_srli_epi32(b, 4);
      if constexpr (Off != 0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(Off));
    } else {
      q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + k * kPanel + 8 * v)));
    }
    // d * q is exact for every format with "+ m" (at most 22 significant bits: Q5_K's 11-bit D
    // times a 6-bit sub-scale times a 5-bit code), so one fused multiply-add gives the bits of
    // d * q, then + m, with one instruction fewer.
    const __m256 qf = _mm256_cvtepi32_ps(q);
    return Min ? _mm256_fmadd_ps(s[v], qf, s[4 + v]) : _mm256_mul_ps(s[v], qf);
  }
}

// Outputs 8 v0 .. 8 (v0 + V) - 1 of the panel for N rows: y[n, j] = bias + sum_k x[n, k] w[j, k];
// x row stride `in`, y row stride y_stride, y at the panel's first output.
template <int N, int V, Code C, bool Min, int Off, bool Sub>
SD_AVX2 void panel_pass(const PanelJob& job, const float* x, float* y, int64_t y_stride, int v0) {
  __m256 acc[N][V];
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < V; ++i) acc[n][i] = _mm256_setzero_ps();
  // The int8 kernels' walk over the blocks and groups (panels_kernels.h), at this weight's group.
  for (Q8Groups at(job, job.group); at.k0 < job.in; at.next()) {
    __m256 s[8];
    if constexpr (is_quantised(C)) group_scales<Min, Sub>(at.blk, at.g, s);
    const uint8_t* codes = at.g + job.sub_bytes;
    const float* xk = x + at.k0;
    for (int64_t k = 0; k < job.group; ++k) {
      __m256 w[V];
      for (int i = 0; i < V; ++i) w[i] = weights8<C, Min, Off>(codes, k, v0 + i, s);
      for (int n = 0; n < N; ++n) {
        const __m256 xb = _mm256_set1_ps(xk[n * job.in + k]);
        for (int i = 0; i < V; ++i) acc[n][i] = _mm256_fmadd_ps(w[i], xb, acc[n][i]);
      }
    }
  }
  store_rows<N, V>(job, acc, y, y_stride, v0);
}

template <int N, Code C, bool Min, int Off, bool Sub>
SD_AVX2 void panel_rows(const PanelJob& job, const float* x, float* y, int64_t y_stride) {
  constexpr int V = N <= 3 ? 4 : N <= 6 ? 2 : 1;
  for (int v0 = 0; v0 < 4 && 8 * v0 < job.valid; v0 += V) panel_pass<N, V, C, Min, Off, Sub>(job, x, y, y_stride, v0);
}

// The panel's weights as fp32 [in][32] (the layout of a kF32 panel).
template <Code C, bool Min, int Off, bool Sub>
SD_AVX2 void decode_panel(const PanelJob& job, float* out) {
  for (Q8Groups at(job, job.group); at.k0 < job.in; at.next()) {
    __m256 s[8];
    if constexpr (is_quantised(C)) group_scales<Min, Sub>(at.blk, at.g, s);
    for (int64_t k = 0; k < job.group; ++k)
      for (int v = 0; v < 4; ++v)
        _mm256_storeu_ps(out + (at.k0 + k) * kPanel + 8 * v, weights8<C, Min, Off>(at.g + job.sub_bytes, k, v, s));
  }
}

// ---- int8 activations --------------------------------------------------------------------------
// y[n, 0..valid) = bias + sum over groups of the formula in panels_kernels.h, for N <= 5 rows
// (r0.. of xr). Registers: w[i] holds outputs 8i .. 8i+7, four k of one output a 32-bit lane.
template <int N, bool Nib, bool Min, bool Sub>
SD_AVX2 void panel_rows_q8(const PanelJob& job, const QuantizedRows& xr, int64_t r0, float* y,
                           int64_t y_stride) {
  constexpr int G = kQ8Group<Nib, Min, Sub>, C = kQ8Offset<Nib, Min>;
  constexpr bool kSigned = C == 128;  // codes as signed bytes, multiplied through their sign
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[N][4];
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < 4; ++i) acc[n][i] = _mm256_setzero_ps();
  const int64_t in = job.in;
  for (Q8Groups at(job, G); at.k0 < in; at.next()) {
    const int64_t k0 = at.k0;
    const uint8_t *blk = at.blk, *g = at.g;
    __m256 sc[8];
    group_scales<Min, Sub>(blk, g, sc);
    const uint8_t* codes = g + job.sub_bytes;
    const int64_t h = k0 / 16;  // the group's first 16-value half
    __m256i dot[N][4];
    for (int n = 0; n < N; ++n) {  // Q4_0's nibbles (C = 8) start at -8 sum xq, as in VNNI's
      const size_t q = static_cast<size_t>((r0 + n) * in / 16 + h);
      const int32_t start = C == 8 ? -8 * (xr.qsum[q] + (G == 32 ? xr.qsum[q + 1] : 0)) : 0;
      for (int i = 0; i < 4; ++i) dot[n][i] = _mm256_set1_epi32(start);
    }
    for (int k = 0; k < G; k += 4) {
      const uint8_t* step = codes + k * (Nib ? 16 : 32);  // this step's 64 (nib4) or 128 bytes
      __m256i w[4];
      if constexpr (Nib) {  // bytes 0-31: outputs 0-7 (low nibble), 16-23 (high); 32-63: 8-15, 24-31
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 32));
        w[0] = _mm256_and_si256(v0, low4);
        w[1] = _mm256_and_si256(v1, low4);
        w[2] = _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4);
        w[3] = _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4);
      } else {
        for (int i = 0; i < 4; ++i) w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 32 * i));
      }
      __m256i q[4];  // signed codes as stored, whose signs go to x
      if constexpr (kSigned)
        for (int i = 0; i < 4; ++i) {
          q[i] = w[i];
          w[i] = _mm256_abs_epi8(q[i]);
        }
      for (int n = 0; n < N; ++n) {
        int32_t x4;
        std::memcpy(&x4, xr.xq.data() + (r0 + n) * in + k0 + k, 4);
        const __m256i xb = _mm256_set1_epi32(x4);
        for (int i = 0; i < 4; ++i) {
          const __m256i x = kSigned ? _mm256_sign_epi8(xb, q[i]) : xb;
          dot[n][i] = _mm256_add_epi32(dot[n][i], _mm256_madd_epi16(_mm256_maddubs_epi16(w[i], x), ones));
        }
      }
    }
    for (int n = 0; n < N; ++n) {
      const int64_t r = r0 + n;
      const __m256 xs = _mm256_set1_ps(xr.scale[static_cast<size_t>(r * in / 32 + k0 / 32)]);
      for (int i = 0; i < 4; ++i)
        acc[n][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[n][i]), _mm256_mul_ps(sc[i], xs), acc[n][i]);
      if constexpr (Min) {
        const size_t q = static_cast<size_t>(r * in / 16 + h);
        const __m256 xsb = _mm256_set1_ps(xr.xsum[q] + (G == 32 ? xr.xsum[q + 1] : 0.0f));
        for (int i = 0; i < 4; ++i) acc[n][i] = _mm256_fmadd_ps(sc[4 + i], xsb, acc[n][i]);
      }
    }
  }
  store_rows<N, 4>(job, acc, y, y_stride, 0);
}

SPECDEC_PANEL_MAKERS();  // MakeKernels, MakeQ8 over this file's kernels (panels_kernels.h)

}  // namespace

namespace avx2 {

const Kernels& f32_kernels() {
  static const Kernels f32 = MakeKernels::make<Code::kF32, false, 0, false>();
  return f32;
}

const Kernels& kernels(const Segment& s) { return kernels_of<MakeKernels>(s, f32_kernels()); }

// F16C through cpuid: clang's __builtin_cpu_supports does not know the name.
bool supported() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// By row count 1..kQ8Rows (more rows go kQ8Rows at a time: a verification of gamma 4 in one pass).
RowsQ8Fn q8_kernel(const Segment& s, int n) { return q8_kernel_of<MakeQ8>(s, n); }

}  // namespace avx2

}  // namespace specdec::model::panels_detail

#endif  // SPECDEC_PANELS_X86
