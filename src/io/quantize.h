#pragma once
// Quantisation of fp32 values to a ggml block format: the inverse of dequant.h, for dtype
// q4_1 (model/causal_lm.h), which requantises a model's weights at load to make a cheaper
// draft model. Lossy by design; the blocks it writes are ordinary ggml blocks that
// dequantize() and the panel kernels read like a file's own.
#include <cstdint>

#include "io/gguf.h"

namespace specdec::io {

// The types quantize() writes: Q4_1 (blocks of 32: fp16 d and m, 4-bit codes).
bool ggml_type_quantizable(GgmlType t);

// Quantises n values (a multiple of the type's block size) from src into dst
// (n / block_size * type_size bytes). Q4_1, per block of 32 values x:
//   m = fp16(min x), d = fp16((max x - min x) / 15),
//   q = clamp(round((x - m) / d), 0, 15)   (q = 0 where d == 0),
// so that every dequantised value d * q + m lies within d / 2 (plus the fp16 rounding of m
// and d) of x. Throws for other types and for non-finite input, naming `who`.
void quantize(GgmlType t, const float* src, uint8_t* dst, int64_t n, const char* who = "quantize");

}  // namespace specdec::io
