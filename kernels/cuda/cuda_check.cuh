#pragma once
// Error handling for the CUDA launchers: every CUDA failure becomes a specdec::Error.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace specdec::kernels::detail {

inline void cuda_check(cudaError_t err, const char* who, const char* what) {
  if (err != cudaSuccess) fail(who, ": ", what, " failed: ", cudaGetErrorString(err));
}

// Launchers need a device; without one they fail with the reason instead of crashing.
inline void require_device(const char* who) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0)
    fail(who, ": no CUDA device available (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")");
}

// After a verification kernel: a sequence whose input was bad reports a negative status in
// n_accepted[b] and the offending index in out_tokens[b][0] (out_stride ints per sequence).
// Copying the [B] statuses also synchronises, so the caller sees finished outputs. The first
// bad sequence is reported through throw_error(who, b, status, index), which does not return.
template <class ThrowError>
void raise_first_bad_sequence(const char* who, const int32_t* n_accepted, const int32_t* out_tokens, int64_t batch,
                              int64_t out_stride, ThrowError throw_error) {
  std::vector<int32_t> status(static_cast<size_t>(batch));
  cuda_check(cudaMemcpy(status.data(), n_accepted, sizeof(int32_t) * status.size(), cudaMemcpyDeviceToHost), who,
             "copy of n_accepted");
  for (int64_t b = 0; b < batch; ++b)
    if (status[static_cast<size_t>(b)] < 0) {
      int32_t bad_index = -1;
      cuda_check(cudaMemcpy(&bad_index, out_tokens + b * out_stride, sizeof(int32_t), cudaMemcpyDeviceToHost), who,
                 "copy of the failing sequence");
      throw_error(who, b, status[static_cast<size_t>(b)], bad_index);
    }
}

}  // namespace specdec::kernels::detail
