// The panel kernels in plain C++, for any CPU: the packed layout, the loops and the order of
// every rounding of panels_avx512.cpp, with a loop over the panel's 32 outputs where that file
// has two 16-lane registers (the compiler vectorises these fixed-length loops for the target).
// panels.cpp runs them where the CPU (or the build) has no AVX-512, or when SPECDEC_KERNELS=
// portable. See panels_kernels.h for the interface.
//
// One difference, by design: the AVX-512 kernel accumulates with fused multiply-adds; here the
// product and the sum are rounded separately (baseline x86-64 has no FMA instruction, and a
// library fmaf per weight would be slow), so the two kernels' outputs differ in the last bits.
// Within this kernel every property holds: each output is one chain over k = 0 .. in-1 for any
// row count, and quantised weights are d * q, then + m, as io::dequantize() forms them.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): without it the compiler may
// fuse d * q + m, or the accumulation, where the target has FMA (e.g. AArch64), and dtype
// native would no longer equal float32.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/dequant.h"
#include "model/panels_kernels.h"

namespace specdec::model::panels_detail {

namespace {

constexpr int kP = static_cast<int>(kPanel);

// The 32 weights of step k of a group into w. d, m: the group's scales and offsets per output
// (group_scales). Quantised: w = d * q, then + m (Min).
template <Code C, bool Min, int Off>
inline void weights_at(const uint8_t* codes, int64_t k, const float* d, const float* m, float* w) {
  if constexpr (C == Code::kF32) {
    std::memcpy(w, codes + k * 4 * kPanel, 4 * kPanel);
  } else if constexpr (C == Code::kBF16 || C == Code::kF16) {
    uint16_t h[kP];
    std::memcpy(h, codes + k * 2 * kPanel, sizeof h);
    for (int j = 0; j < kP; ++j) w[j] = C == Code::kBF16 ? io::bf16_to_fp32(h[j]) : io::fp16_to_fp32(h[j]);
  } else {
    int q[kP];
    if constexpr (C == Code::kNib4) {  // byte j: output j in the low nibble, j + 16 in the high
      const uint8_t* p = codes + k * kPanel / 2;
      for (int j = 0; j < kP / 2; ++j) {
        q[j] = (p[j] & 0x0F) - Off;
        q[j + kP / 2] = (p[j] >> 4) - Off;
      }
    } else {
      const int8_t* p = reinterpret_cast<const int8_t*>(codes + k * kPanel);
      for (int j = 0; j < kP; ++j) q[j] = p[j];
    }
    for (int j = 0; j < kP; ++j) w[j] = d[j] * static_cast<float>(q[j]);
    if constexpr (Min)
      for (int j = 0; j < kP; ++j) w[j] = w[j] + m[j];
  }
}

// A group's scales: d and, with Min, m per output, from the block header (fp16 D, M / Dmin)
// and the group's sub-scales: d = D * sc and m = -(Dmin * mn) with Sub (sc signed without
// Min: Q6_K), else d = D and m = M.
template <Code C, bool Min, bool Sub>
inline void group_scales(const uint8_t* header, const uint8_t* group, float* d, float* m) {
  if constexpr (C == Code::kNib4 || C == Code::kInt8) {
    uint16_t h[2 * kP];
    std::memcpy(h, header, (Min ? 2 : 1) * kP * sizeof(uint16_t));
    for (int j = 0; j < kP; ++j) d[j] = io::fp16_to_fp32(h[j]);
    if constexpr (Min)
      for (int j = 0; j < kP; ++j) m[j] = io::fp16_to_fp32(h[kP + j]);
    if constexpr (Sub) {
      for (int j = 0; j < kP; ++j)
        d[j] = d[j] * static_cast<float>(Min ? static_cast<int>(group[j]) : static_cast<int8_t>(group[j]));
      if constexpr (Min)
        for (int j = 0; j < kP; ++j) m[j] = -(m[j] * static_cast<float>(group[kP + j]));
    }
  }
}

// y[n, 0..valid) = acc[n] + bias for N rows: the last step of both kernels.
template <int N>
inline void store_rows(const PanelJob& job, const float (&acc)[N][kP], float* y, int64_t y_stride) {
  for (int n = 0; n < N; ++n)
    for (int64_t j = 0; j < job.valid; ++j)
      y[n * y_stride + j] = acc[n][j] + (job.bias ? job.bias[j] : 0.0f);
}

template <int N, Code C, bool Min, int Off, bool Sub>
void panel_rows(const PanelJob& job, const float* x, float* y, int64_t y_stride) {
  float acc[N][kP] = {};
  const int64_t per_block = job.group * job.groups_per_block;
  const uint8_t* blk = job.panel;
  for (int64_t b0 = 0; b0 < job.in; b0 += per_block, blk += job.block_bytes) {
    const uint8_t* g = blk + job.header_bytes;
    for (int64_t k0 = b0; k0 < b0 + per_block; k0 += job.group, g += job.group_bytes) {
      float d[kP], m[kP];
      group_scales<C, Min, Sub>(blk, g, d, m);
      const uint8_t* codes = g + job.sub_bytes;
      const float* xk = x + k0;
      for (int64_t k = 0; k < job.group; ++k) {
        float w[kP];
        weights_at<C, Min, Off>(codes, k, d, m, w);
        for (int n = 0; n < N; ++n) {
          const float xb = xk[n * job.in + k];
          for (int j = 0; j < kP; ++j) acc[n][j] = acc[n][j] + w[j] * xb;
        }
      }
    }
  }
  store_rows<N>(job, acc, y, y_stride);
}

template <Code C, bool Min, int Off, bool Sub>
void decode_panel(const PanelJob& job, float* out) {
  const int64_t per_block = job.group * job.groups_per_block;
  const uint8_t* blk = job.panel;
  for (int64_t b0 = 0; b0 < job.in; b0 += per_block, blk += job.block_bytes) {
    const uint8_t* g = blk + job.header_bytes;
    for (int64_t k0 = b0; k0 < b0 + per_block; k0 += job.group, g += job.group_bytes) {
      float d[kP], m[kP];
      group_scales<C, Min, Sub>(blk, g, d, m);
      for (int64_t k = 0; k < job.group; ++k)
        weights_at<C, Min, Off>(g + job.sub_bytes, k, d, m, out + (k0 + k) * kPanel);
    }
  }
}

// y[n, 0..valid) = bias + sum over groups of the formula in panels_kernels.h (QuantizedRows),
// for N <= 5 rows (r0.. of xr): the integer dot products of the codes made unsigned (u) with
// xq, exact in int32 in any order, then the same float steps as the AVX512-VNNI kernel.
template <int N, bool Nib, bool Min, bool Sub>
void panel_rows_q8(const PanelJob& job, const QuantizedRows& xr, int64_t r0, float* y, int64_t y_stride) {
  constexpr int G = kQ8Group<Nib, Min, Sub>, C = kQ8Offset<Nib, Min>;
  float acc[N][kP] = {};
  const int64_t in = job.in;
  constexpr Code kCode = Nib ? Code::kNib4 : Code::kInt8;
  for (Q8Groups at(job, G); at.k0 < in; at.next()) {
    const int64_t k0 = at.k0;
    const uint8_t *blk = at.blk, *g = at.g;
    float d[kP], m[kP];
    group_scales<kCode, Min, Sub>(blk, g, d, m);
    const uint8_t* codes = g + job.sub_bytes;
    int32_t dot[N][kP] = {};
    for (int64_t k = 0; k < G; k += 4) {
      // Quad-major (code_byte): byte 4o + t of a 64-byte half holds k + t of output o.
      int32_t u[kP][4];
      if constexpr (Nib) {  // one 64-byte half: outputs o (low nibble) and o + 16 (high)
        const uint8_t* v = codes + k * 16;
        for (int o = 0; o < kP / 2; ++o)
          for (int t = 0; t < 4; ++t) {
            u[o][t] = v[4 * o + t] & 0x0F;
            u[o + kP / 2][t] = v[4 * o + t] >> 4;
          }
      } else {  // two halves: outputs 0-15, then 16-31; signed codes: the sign bit flipped
        const uint8_t* v = codes + k * 32;
        for (int o = 0; o < kP; ++o)
          for (int t = 0; t < 4; ++t) u[o][t] = C == 0 ? v[4 * o + t] : v[4 * o + t] ^ 0x80;
      }
      for (int n = 0; n < N; ++n) {
        const int8_t* x4 = xr.xq.data() + (r0 + n) * in + k0 + k;
        for (int o = 0; o < kP; ++o)
          dot[n][o] += u[o][0] * x4[0] + u[o][1] * x4[1] + u[o][2] * x4[2] + u[o][3] * x4[3];
      }
    }
    for (int n = 0; n < N; ++n) {
      const int64_t r = r0 + n, h = k0 / 16;
      const int32_t qs = xr.qsum[static_cast<size_t>(r * in / 16 + h)] +
                         (G == 32 ? xr.qsum[static_cast<size_t>(r * in / 16 + h + 1)] : 0);
      const int32_t corr = C * qs;
      const float xs = xr.scale[static_cast<size_t>(r * in / 32 + k0 / 32)];
      for (int o = 0; o < kP; ++o)
        acc[n][o] = acc[n][o] + static_cast<float>(dot[n][o] - corr) * (d[o] * xs);
      if constexpr (Min) {
        const float x_sum = xr.xsum[static_cast<size_t>(r * in / 16 + h)] +
                            (G == 32 ? xr.xsum[static_cast<size_t>(r * in / 16 + h + 1)] : 0.0f);
        for (int o = 0; o < kP; ++o) acc[n][o] = acc[n][o] + m[o] * x_sum;
      }
    }
  }
  store_rows<N>(job, acc, y, y_stride);
}

SPECDEC_PANEL_MAKERS();  // MakeKernels, MakeQ8 over this file's kernels (panels_kernels.h)

}  // namespace

namespace portable {

const Kernels& f32_kernels() {
  static const Kernels f32 = MakeKernels::make<Code::kF32, false, 0, false>();
  return f32;
}

const Kernels& kernels(const Segment& s) { return kernels_of<MakeKernels>(s, f32_kernels()); }

void quantize(const float* x, int64_t blocks, QuantizedRows& xr) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x + 32 * b;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    xr.scale[static_cast<size_t>(b)] = amax / 127.0f;
    for (int64_t h = 2 * b; h < 2 * b + 2; ++h) {  // the 16-value halves
      const float* u = x + 16 * h;
      int32_t qs = 0;
      for (int i = 0; i < 16; ++i) {
        const float t = u[i] * inv;  // |t| <= 127: round half away from zero
        const int q = std::clamp(static_cast<int>(t + (t >= 0 ? 0.5f : -0.5f)), -127, 127);
        xr.xq[static_cast<size_t>(16 * h + i)] = static_cast<int8_t>(q);
        qs += q;
      }
      float s[8];  // the tree of panels_kernels.h
      for (int i = 0; i < 8; ++i) s[i] = u[i] + u[i + 8];
      for (int w = 4; w >= 1; w /= 2)
        for (int i = 0; i < w; ++i) s[i] = s[i] + s[i + w];
      xr.qsum[static_cast<size_t>(h)] = qs;
      xr.xsum[static_cast<size_t>(h)] = s[0];
    }
  }
}

// By row count 1..kQ8Rows (more rows go kQ8Rows at a time: a verification of gamma 4 in one pass).
RowsQ8Fn q8_kernel(const Segment& s, int n) { return q8_kernel_of<MakeQ8>(s, n); }

}  // namespace portable

}  // namespace specdec::model::panels_detail
