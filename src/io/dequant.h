#pragma once
// Dequantisation of ggml block formats to fp32. Block layouts follow ggml's
// documented formats (ggml-common.h): QK4_0 = QK8_0 = 32 elements per block; K-quants
// use super-blocks of QK_K = 256.
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

namespace specdec::io {

// Elements per block and bytes per block of a type (1 / sizeof(float) etc. for float types).
int64_t ggml_block_size(GgmlType t);
int64_t ggml_type_size(GgmlType t);
bool ggml_type_supported(GgmlType t);  // can we dequantise it?

// Dequantises n elements (a multiple of the block size) from src into dst.
// Throws specdec::Error for unsupported types.
void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n);

// A quantised block as integer codes and per-group scales: element i of the block is
//   d[g] * q[i]           (add == kNone: Q6_K)
//   d[g] * q[i] + 0.0f    (add == kZero: Q4_0, Q5_0, Q8_0; turns a -0 into +0)
//   d[g] * q[i] + m[g]    (add == kMin: Q4_1, Q5_1, Q4_K, Q5_K; a K-quant's "- min" is
//                          "+ m" with m = -min, which IEEE rounds identically)
// with g = i / group, each step rounded to fp32 in that order. dequantize() computes
// exactly this; the native panel kernel (model/panels.h) repeats it in registers, which is
// why the two give bit-identical weights.
struct BlockCodes {
  enum class Add { kNone, kZero, kMin };
  int64_t n = 0;      // elements: 32, or 256 for K-quants
  int64_t group = 0;  // elements per scale: 32, or 16 (Q6_K)
  Add add = Add::kNone;
  int8_t q[256];
  float d[16], m[16];
  // The block's own compact form of d and m (native packing keeps this, not the floats):
  //   n_sub == 0 (one group):        d[0] = half(dh),             m[0] = half(mh)  (kMin)
  //   n_sub > 0 (K-quant sub-blocks): d[g] = half(dh) * sub_d[g],  m[g] = -(half(mh) * sub_m[g])
  // each product rounded to fp32 (the factors are 6- or 8-bit integers; sub_d is signed for Q6_K).
  uint16_t dh = 0, mh = 0;
  int64_t n_sub = 0;
  int16_t sub_d[16], sub_m[16];
};
// True for the block-quantised types unpack_block() reads (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K
// Q5_K Q6_K); false for F32/F16/BF16 and the unsupported ones.
bool ggml_type_has_codes(GgmlType t);
// One block of type t at src. Throws for a type without codes.
void unpack_block(GgmlType t, const uint8_t* src, BlockCodes& out);

float fp16_to_fp32(uint16_t h);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round-to-nearest-even, for building test blocks

}  // namespace specdec::io
