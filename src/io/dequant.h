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

float fp16_to_fp32(uint16_t h);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round-to-nearest-even, for building test blocks

}  // namespace specdec::io
