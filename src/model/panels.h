#pragma once
// Weights packed in panels of 32 output features, and the kernel that streams them.
//
// Decode (1 row) and verification (2-9 rows) are bound by reading W from memory. A panel
// holds 32 outputs k-major ([in][32]), one sequential stream for the prefetcher; for every k
// the kernel forms the 32 weights of that k (AVX-512: in two zmm registers), broadcasts
// x[n, k] of each row (up to 8 at a time) and accumulates (AVX-512: one fused multiply-add).
// Each output is thus one chain over k = 0 .. in-1, the same in decode, verification and
// prefill, so a row's result never depends on how many rows came with it.
//
// The weights of a panel are stored in one of five codes:
//   f32, bf16, f16  the values themselves (bf16 and f16 widen exactly to fp32)
//   nib4, int8      GGUF's integer codes with per-group fp32 scales (dtype native): the kernel
//                   forms d * q (+ m) in registers in exactly the order io::dequantize() does
//                   (io::BlockCodes), so a native layer's weights, and therefore its outputs,
//                   are bit-identical to the same file loaded as float32.
// A layer may stack several GGUF tensors of different types (q/k/v, gate/up): each is a
// segment of whole panels in its own code.
//
// dtype native_q8 is a separate, faster and not bit-identical variant (as llama.cpp computes):
// each row of x is quantised to int8 with one fp32 scale per 32 values, and the quantised
// panels are multiplied with integer dot products (AVX512-VNNI vpdpbusd: 64 products per
// instruction instead of 16 FMAs). Its codes are stored "quad-major" (4 consecutive k of an
// output side by side, the operand order of vpdpbusd) and it is tested against float32 with
// an error bound derived from the quantisation step, not for equality.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/dequant.h"
#include "io/gguf.h"

namespace specdec::model {

// A GGUF tensor's blocks, viewed in place (the file must stay mapped while they are packed).
struct QuantBlocks {
  std::string name;                 // for error messages
  io::GgmlType type = io::GgmlType::F32;
  const uint8_t* data = nullptr;    // `out` rows of `in` elements, ggml's row-major blocks
  int64_t out = 0, in = 0;
  int64_t rope_heads = 0;           // > 0: rows are in llama.cpp's interleaved q/k order for
                                    // that many heads; packing restores HF order
  bool file_mapped = false;         // data is a read-only file mapping: once packed, its pages
                                    // are dropped (MADV_DONTNEED) so they do not add to the RSS
  std::shared_ptr<const std::vector<uint8_t>> storage;  // owns data when it is not the file's
                                                       // (requantised blocks, dtype q4_1)
  bool defined() const { return data != nullptr; }
};

// The kernel has three implementations over the same layout, picked once per process:
//   avx512    AVX-512F intrinsics (int8 activations: AVX512-VNNI), where the CPU has them
//   avx2      AVX2 intrinsics (with FMA and F16C) where AVX-512 is missing, and for int8
//             activations where AVX512-VNNI is: avx512's bits, 8 lanes a register where that
//             one has 16 (panels_avx2.cpp)
//   portable  plain C++, on any CPU; the only difference: it rounds each product and sum
//             separately where the others fuse them (FMA), so it differs in the last bits.
//             Within each, every property above holds (row-count independence, native ==
//             float32 bit for bit).
// Where the CPU has AMX-INT8 (and the OS lets a process use its tiles), the int8 kernel runs
// prefills (16 rows or more) 8 rows at a time on AMX tiles: the same integer sums and float
// steps as the AVX512-VNNI kernel, so the same bits (panels_avx512.cpp).
// The environment variable SPECDEC_KERNELS=portable forces the portable one (tests run both on
// an AVX-512 or AVX2 machine), SPECDEC_KERNELS=no-amx leaves AMX unused; unset or "auto" picks
// the fastest; other values are an error. A build with -DSPECDEC_PORTABLE=ON, or for a CPU
// other than x86-64, contains only the portable one. The choice for fp32 activations
// ("avx512", "avx2" or "portable") and for int8 activations ("avx512-vnni+amx", "avx512-vnni",
// "avx2" or "portable").
const char* panels_kernel();
const char* panels_int8_kernel();

// The HF row that GGUF row `row` of an interleaved q/k weight with `n_heads` heads and `out`
// rows holds (llama.cpp's converter: HF row h*hd + s*hd/2 + i -> GGUF row h*hd + 2i + s).
int64_t rope_hf_row(int64_t row, int64_t out, int64_t n_heads);

class PanelWeight {
 public:
  PanelWeight() = default;
  // w: [out, in] fp32, stored as fp32 (dtype kFloat) or bf16 (kBFloat16) panels.
  static PanelWeight from_tensor(const at::Tensor& w, at::ScalarType dtype);
  // GGUF tensors stacked along out, each kept in its own type (dtype native). Supported:
  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K; parts must share `in`.
  // int8_dot: quantised types run with int8 activations (dtype native_q8; float types do not).
  static PanelWeight from_blocks(const std::vector<QuantBlocks>& parts, bool int8_dot = false);

  bool defined() const { return !segs_.empty(); }
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t bytes() const;  // bytes the kernel streams per call
  // "f32", "bf16", or the GGUF types of the segments ("Q4_K+Q6_K"; "+q8" for int8_dot).
  std::string describe() const;
  // From GGUF blocks (from_blocks), not from a tensor.
  bool native() const { return native_; }

  // y = x W^T (+ b). x: [N, in] fp32 contiguous; b: [out] fp32 or undefined -> [N, out].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& b) const;
  // Rows ids of W as fp32: [n] int64 -> [n, in] (a tied embedding reads the LM head).
  at::Tensor rows(const at::Tensor& ids) const;
  // All of W as fp32 [out, in] (bit-identical to io::dequantize of the parts).
  at::Tensor dequantized() const;

 // The layout, for the kernels (panels_kernels.h).
  enum class Code : uint8_t { kF32, kBF16, kF16, kNib4, kInt8 };
  struct Segment {
    Code code = Code::kF32;
    io::GgmlType type = io::GgmlType::F32;  // source type (describe())
    io::BlockCodes::Add add = io::BlockCodes::Add::kNone;
    int offset = 0;           // nib4: subtracted from each code (Q4_0 stores q + 8)
    // A panel is a run of blocks (a GGUF block of each of its 32 outputs); a block is a header
    // (fp16 D[32], then M or Dmin[32] with kMin) and groups_per_block groups; a group is its
    // integer sub-scales (K-quants: sc[32], then mn[32] with kMin) and its codes. A group's
    // scale is D (or D * sc) and its offset M (or -(Dmin * mn)), as io::BlockCodes. Float
    // codes: one block of one group of `in` k, no header.
    int64_t group = 0;            // k per scale group (quantised) or in (float codes)
    int64_t groups_per_block = 1;
    bool sub = false;             // groups have integer sub-scales (Q4_K, Q5_K, Q6_K)
    int64_t header_bytes = 0, sub_bytes = 0;
    int64_t group_bytes = 0;      // sub_bytes + codes
    int64_t block_bytes() const { return header_bytes + groups_per_block * group_bytes; }
    int64_t panel_bytes(int64_t in) const { return in / (group * groups_per_block) * block_bytes(); }
    int64_t out0 = 0, out = 0, panel0 = 0, n_panels = 0;
    bool int8_dot = false;        // codes quad-major, run with int8 activations (native_q8)
    at::Tensor data;              // uint8 [n_panels * panel_bytes()]
  };
  const Segment& segment_of_panel(int64_t p) const;
  const Segment& segment_of_output(int64_t o) const;

 private:
  // Output o's weights as fp32, k = 0 .. in-1, into dst.
  void decode_row(int64_t o, float* dst) const;

  std::vector<Segment> segs_;
  int64_t out_ = 0, in_ = 0, n_panels_ = 0;
  at::ScalarType tensor_dtype_ = at::kFloat;  // of a from_tensor weight
  bool native_ = false;
};

}  // namespace specdec::model
