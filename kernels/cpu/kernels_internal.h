#pragma once
// Host-side argument checks and error messages shared by the CPU and CUDA launchers.
#include <cstdint>

#include "kernels/kernels.h"

namespace specdec::kernels::detail {

const char* mode_name(VerifyMode mode);

// Checks sizes and pointers (not the data): throws specdec::Error naming the field.
void check_verify_args(const VerifyArgs& args, const char* who);
// Throws specdec::Error for a row status < 0 from math::verify_row / math::check_row.
[[noreturn]] void throw_row_error(const char* who, int64_t b, int32_t status, int32_t bad_index);

// Tree verification: the same contract for TreeVerifyArgs (tree_cpu.cpp).
void check_tree_args(const TreeVerifyArgs& args, const char* who);
[[noreturn]] void throw_tree_error(const char* who, int64_t b, int32_t status, int32_t bad_index);

void check_compact_args(const CompactArgs& args, const char* who);
// Throws for a status < 0 from math::check_keep_list.
[[noreturn]] void throw_compact_error(const char* who, int64_t b, int32_t status, int32_t bad_index);

void check_reorder_args(const float* dst, const float* src, const int64_t* indices, int64_t batch,
                        int64_t row_elems, const char* who);

}  // namespace specdec::kernels::detail
