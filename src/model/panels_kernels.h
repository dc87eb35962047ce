#pragma once
// The panel kernels' internal interface (not a public header): what panels.cpp (packing,
// dispatch) shares with the three implementations of the kernels over the same packed layout:
//   panels_avx512.cpp    AVX-512F intrinsics (and AVX512-VNNI for native_q8); x86-64 only,
//                        and not compiled at all with -DSPECDEC_PORTABLE=ON
//   panels_avx2.cpp      both sets with AVX2 intrinsics, where AVX-512 (or, for the int8
//                        kernel, AVX512-VNNI) is missing; bit-identical to panels_avx512.cpp;
//                        x86-64 only, as above
//   panels_portable.cpp  plain C++ loops (the compiler vectorises them for the target), any CPU
// panels.cpp picks one set once per process (panels_kernel() in panels.h says which).
//
// All compute each output as one chain over k = 0 .. in-1 whatever the row count, and form
// quantised weights as d * q, then + m, exactly as io::dequantize(); so within each kernel a
// row's result never depends on the rows beside it and dtype native equals float32 bit for bit.
// They differ in one rounding: the AVX-512 and AVX2 kernels accumulate with fused multiply-adds,
// the portable one rounds the product and the sum separately (baseline x86-64 has no FMA), so
// their outputs differ from it in the last bits.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/panels.h"

// 1 when this build contains the x86-64 kernels (panels_avx512.cpp, panels_avx2.cpp).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(SPECDEC_PORTABLE)
#define SPECDEC_PANELS_X86 1
#else
#define SPECDEC_PANELS_X86 0
#endif

namespace specdec::model::panels_detail {

constexpr int64_t kPanel = 32;  // output features per panel
using Code = PanelWeight::Code;
using Segment = PanelWeight::Segment;
using Add = io::BlockCodes::Add;

constexpr bool is_quantised(Code c) { return c == Code::kNib4 || c == Code::kInt8; }

// Byte of the codes of a group that holds code (k, j) (k within the group, output j of the
// panel); a nib4 byte holds outputs j and j + 16 (low / high nibble).
//   exact kernel:   k-major, one k's 32 codes (or 16 bytes of nibbles) after the other
//   int8_dot (q8):  quad-major, for vpdpbusd: per 4 k, output o's 4 codes in bytes 4o..4o+3,
//                   outputs 0-15 in one 64-byte half and 16-31 in the next (int8; nib4 packs
//                   both halves into the nibbles of one 64 bytes)
inline int64_t code_byte(const Segment& s, int64_t k, int64_t j) {
  const int64_t o = j % 16;
  if (s.code == Code::kNib4)
    return s.int8_dot ? (k / 4) * 64 + 4 * o + k % 4 : k * kPanel / 2 + o;
  return s.int8_dot ? (k / 4) * 128 + (j / 16) * 64 + 4 * o + k % 4 : k * kPanel + j;
}

// Where a panel is and what it computes.
struct PanelJob {
  const uint8_t* panel;
  int64_t in, group, groups_per_block, header_bytes, sub_bytes, group_bytes, block_bytes;
  const float* bias;  // at the panel's first output, or null
  int64_t valid;      // outputs of the panel that exist (32 but at a segment's end)
};

// Panel lp of segment s (in: the weight's inputs; bias: the weight's, or null).
inline PanelJob panel_job(const Segment& s, int64_t lp, int64_t in, const float* bias) {
  const int64_t o0 = s.out0 + lp * kPanel;
  return {static_cast<const uint8_t*>(s.data.data_ptr()) + lp * s.panel_bytes(in), in, s.group,
          s.groups_per_block, s.header_bytes, s.sub_bytes, s.group_bytes, s.block_bytes(),
          bias ? bias + o0 : nullptr, std::min(kPanel, s.out0 + s.out - o0)};
}

// y[n, 0..valid) = bias + sum_k x[n, k] w[., k] for N rows (the function of rows[N]); x row
// stride `in`, y row stride y_stride, y at the panel's first output.
using RowsFn = void (*)(const PanelJob&, const float*, float*, int64_t);
// The panel's weights as fp32 [in][32] (the layout of a kF32 panel).
using DecodeFn = void (*)(const PanelJob&, float*);

struct Kernels {
  RowsFn rows[9];  // by row count 1..8
  DecodeFn decode;
};

// ---- int8 activations (dtype native_q8) -------------------------------------------------------
// Each row of x is quantised per 32 values: scale = max|x| / 127, xq = round(x * 127 / max|x|)
// (half away from zero). Sums per 16 values of xq (integers) and of x (fp32, added as a tree:
// v[i] + v[i + 8], then + 4, + 2, + 1, the order of one 16-lane register's reduction, so both
// implementations give the same bits) serve the code offset and the "+ m" term:
//   sum_k (d q_k + m) x_k  ~=  d * scale * sum_k q_k xq_k  +  m * sum_k x_k
// where q = u - C for the unsigned byte u vpdpbusd reads (C: kQ8Offset below), so
// sum q xq = sum u xq - C * sum xq.
struct QuantizedRows {
  int64_t in = 0;
  std::vector<int8_t> xq;      // [N, in]
  std::vector<float> scale;    // [N, in / 32]
  std::vector<int32_t> qsum;   // [N, in / 16]  sum of xq
  std::vector<float> xsum;     // [N, in / 16]  sum of x

  QuantizedRows(const float* x, int64_t n, int64_t in_);  // panels.cpp
};

// The quantisation above of `blocks` consecutive 32-value blocks of x into xr's arrays from
// block 0 (one implementation per kernel set; the result is the same bits in both).
using QuantizeFn = void (*)(const float* x, int64_t blocks, QuantizedRows& xr);

// Rows r0 .. r0+n-1 of xr against one panel, n <= kQ8Rows.
using RowsQ8Fn = void (*)(const PanelJob&, const QuantizedRows&, int64_t r0, float*, int64_t y_stride);

// The int8 kernels' layout of a segment, fixed by its type (from_blocks() checks it): k
// per group (Q6_K 16, every other type 32) and the offset C that makes the codes the unsigned
// bytes vpdpbusd reads (u = q + C). Codes with "+ m" (Q4_1, Q4_K, Q5_1, Q5_K) are unsigned
// already, C = 0; Q4_0's nibbles hold q + 8; the signed int8 codes (Q8_0, Q5_0, Q6_K) get their
// top bit flipped, C = 128.
template <bool Nib, bool Min, bool Sub>
constexpr int kQ8Group = !Nib && Sub && !Min ? 16 : 32;
template <bool Nib, bool Min>
constexpr int kQ8Offset = Min ? 0 : Nib ? 8 : 128;
// Rows per pass of the int8 kernel: a verification of gamma 4 in one pass (8 rows would need more
// than AVX-512's 32 vector registers for their int and float accumulators).
constexpr int kQ8Rows = 5;
// Rows r0 .. r0+rows-1 of xr against one panel with AMX tiles, rows a multiple of kAmxRows.
using RowsAmxFn = void (*)(const PanelJob&, const QuantizedRows&, int64_t r0, int64_t rows, float*, int64_t y_stride);
// Rows per pass of the AMX kernel (prefill, panels_avx512.cpp): 8 rows keep their float
// accumulators in registers; a forward uses it for runs of 8 rows from kAmxMinRows rows on.
constexpr int kAmxRows = 8;
constexpr int64_t kAmxMinRows = 16;

// The int8 kernels' walk over a panel's groups of G k (a block holds groups_per_block of them
// after its header): blk is the current block, g the current group. The kernels loop
//   for (Q8Groups at(job, G); at.k0 < job.in; at.next()) ...
struct Q8Groups {
  const PanelJob& job;
  const int64_t group_k;
  int64_t k0 = 0;
  const uint8_t* blk;
  const uint8_t* g;
  int64_t in_block = 0;  // groups of this block already walked (a counter: no division per group)
  Q8Groups(const PanelJob& j, int64_t G) : job(j), group_k(G), blk(j.panel), g(j.panel + j.header_bytes) {}
  void next() {
    k0 += group_k;
    g += job.group_bytes;
    if (++in_block == job.groups_per_block) {  // the next block: its header, then its groups
      in_block = 0;
      blk += job.block_bytes;
      g = blk + job.header_bytes;
    }
  }
};

// A segment's kernels, picked by its code from one implementation's instantiations: nib4 for
// Q4_0 (offset 8), Q4_1 (+ M) and Q4_K (sub-scales, - Dmin * mn); int8 for Q5_0 / Q8_0, Q5_1
// (+ M), Q5_K (sub-scales, - Dmin * mn) and Q6_K (signed sub-scales). Each file passes its own
// makers (types in its anonymous namespace, so each file gets its own tables):
//   Set::template make<Code, Min, Off, Sub>()  its Kernels
//   Q8::template make<Nib, Min, Sub>()         its int8 kernels by row count 0..kQ8Rows
// SPECDEC_PANEL_MAKERS() writes both, once for the three files: a file expands it in its
// anonymous namespace after its panel_rows<N, C, Min, Off, Sub> (fp32 activations, N = 1..8),
// decode_panel<C, Min, Off, Sub> and panel_rows_q8<N, Nib, Min, Sub> (int8, N = 1..kQ8Rows).
#define SPECDEC_PANEL_MAKERS()                                                                       \
  struct MakeKernels {                                                                                \
    template <Code C, bool Min, int Off, bool Sub>                                                    \
    static constexpr Kernels make() {                                                                 \
      return {{nullptr, panel_rows<1, C, Min, Off, Sub>, panel_rows<2, C, Min, Off, Sub>,             \
               panel_rows<3, C, Min, Off, Sub>, panel_rows<4, C, Min, Off, Sub>,                      \
               panel_rows<5, C, Min, Off, Sub>, panel_rows<6, C, Min, Off, Sub>,                      \
               panel_rows<7, C, Min, Off, Sub>, panel_rows<8, C, Min, Off, Sub>},                     \
              decode_panel<C, Min, Off, Sub>};                                                        \
    }                                                                                                 \
  };                                                                                                  \
  struct MakeQ8 {                                                                                     \
    template <bool Nib, bool Min, bool Sub>                                                           \
    static constexpr std::array<RowsQ8Fn, kQ8Rows + 1> make() {                                       \
      return {nullptr, panel_rows_q8<1, Nib, Min, Sub>, panel_rows_q8<2, Nib, Min, Sub>,              \
              panel_rows_q8<3, Nib, Min, Sub>, panel_rows_q8<4, Nib, Min, Sub>,                       \
              panel_rows_q8<5, Nib, Min, Sub>};                                                       \
    }                                                                                                 \
  }

template <class Set>
const Kernels& kernels_of(const Segment& s, const Kernels& f32) {
  static const Kernels bf16 = Set::template make<Code::kBF16, false, 0, false>();
  static const Kernels f16 = Set::template make<Code::kF16, false, 0, false>();
  static const Kernels q4_0 = Set::template make<Code::kNib4, false, 8, false>();
  static const Kernels q4_1 = Set::template make<Code::kNib4, true, 0, false>();
  static const Kernels q4_k = Set::template make<Code::kNib4, true, 0, true>();
  static const Kernels q8_0 = Set::template make<Code::kInt8, false, 0, false>();
  static const Kernels q5_1 = Set::template make<Code::kInt8, true, 0, false>();
  static const Kernels q5_k = Set::template make<Code::kInt8, true, 0, true>();
  static const Kernels q6_k = Set::template make<Code::kInt8, false, 0, true>();
  const bool min = s.add == Add::kMin;
  switch (s.code) {
    case Code::kF32: return f32;
    case Code::kBF16: return bf16;
    case Code::kF16: return f16;
    case Code::kNib4: return s.sub ? q4_k : min ? q4_1 : q4_0;
    case Code::kInt8: return s.sub ? (min ? q5_k : q6_k) : min ? q5_1 : q8_0;
  }
  fail("panels: unknown code");
}

template <class Q8>
auto q8_kernel_of(const Segment& s, int n) {
  static const auto q4_0 = Q8::template make<true, false, false>(), q4_1 = Q8::template make<true, true, false>();
  static const auto q4_k = Q8::template make<true, true, true>(), q8_0 = Q8::template make<false, false, false>();
  static const auto q5_1 = Q8::template make<false, true, false>(), q5_k = Q8::template make<false, true, true>();
  static const auto q6_k = Q8::template make<false, false, true>();
  const bool min = s.add == Add::kMin, nib = s.code == Code::kNib4;
  const auto& table = nib ? (s.sub ? q4_k : min ? q4_1 : q4_0) : (s.sub ? (min ? q5_k : q6_k) : min ? q5_1 : q8_0);
  return table[static_cast<size_t>(n)];
}

// Each implementation's entry points: the fp32-panel kernels, the kernels of a segment's code,
// and the int8 kernel of a segment (int8_dot) for n rows (1 .. kQ8Rows).
#if SPECDEC_PANELS_X86
namespace avx512 {
const Kernels& f32_kernels();      // needs AVX-512F at run time
const Kernels& kernels(const Segment& s);
RowsQ8Fn q8_kernel(const Segment& s, int n);  // needs AVX-512F, BW and VNNI
void quantize(const float* x, int64_t blocks, QuantizedRows& xr);  // needs AVX-512F
bool amx_usable();                   // the CPU has AMX-INT8 and the kernel lets us use it
RowsAmxFn amx_kernel(const Segment& s);  // needs amx_usable() and the above
}  // namespace avx512
namespace avx2 {
bool supported();                             // the CPU has AVX2, FMA and F16C
const Kernels& f32_kernels();                 // these three need supported()
const Kernels& kernels(const Segment& s);
RowsQ8Fn q8_kernel(const Segment& s, int n);
}  // namespace avx2
#endif
namespace portable {
const Kernels& f32_kernels();
const Kernels& kernels(const Segment& s);
RowsQ8Fn q8_kernel(const Segment& s, int n);
void quantize(const float* x, int64_t blocks, QuantizedRows& xr);
}  // namespace portable

}  // namespace specdec::model::panels_detail
