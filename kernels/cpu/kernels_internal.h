#pragma once
// Host-side argument checks and error messages shared by the CPU and CUDA launchers.
#include <cstdint>

#include "kernels/kernels.h"

namespace specdec::kernels::detail {

// Checks sizes and pointers (not the data): throws specdec::Error naming the field.
void check_verify_args(const VerifyArgs& args, const char* who);
// Throws specdec::Error for a row status < 0 from math::verify_row / math::check_row.
[[noreturn]] void throw_row_error(const char* who, int64_t b, int32_t status, int32_t bad_index);

// Token choice (PickArgs): sizes and pointers.
void check_pick_args(const PickArgs& args, const char* who);

// Tree verification: the same contract for TreeVerifyArgs (tree_cpu.cpp).
void check_tree_args(const TreeVerifyArgs& args, const char* who);
[[noreturn]] void throw_tree_error(const char* who, int64_t b, int32_t status, int32_t bad_index);

// Sizes and pointers only (the CUDA launcher's arrays are device memory).
void check_compact_sizes(const CompactArgs& args, const char* who);
// Throws for a status < 0 from math::check_keep_list.
[[noreturn]] void throw_compact_error(const char* who, int64_t b, int32_t status, int32_t bad_index);

void check_reorder_args(const float* dst, const float* src, const int64_t* indices, int64_t batch,
                        int64_t row_elems, const char* who);

// CUDA launches: the grid limits and the workspace contract, checked on the host before
// anything is queued.
void check_workspace(const CudaLaunch& launch, size_t need, const char* who);

// verify_cuda's workspace, per (sequence, row) of the B x (gamma+1) rows; offsets in bytes,
// each section 256-byte aligned. Sections a mode does not use have size 0.
struct VerifyWorkspace {
  size_t token = 0;   // int32 [B, gamma+1]: argmax (greedy) or sample (tokens_only) of each row
  size_t weight = 0;  // double [B, gamma+1]: the scale w on p of each row's residual (sampling, block)
  size_t mass = 0;    // double [B, gamma+1, kLanes]: lane masses of each row's sampling weights
  size_t bytes = 0;   // total
};
VerifyWorkspace verify_workspace_layout(const VerifyArgs& args, const char* who);

}  // namespace specdec::kernels::detail
