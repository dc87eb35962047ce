#pragma once
// Error handling for the CUDA launchers: every CUDA failure becomes a specdec::Error. Nothing
// here synchronises: launch errors come from cudaGetLastError, errors in the data come back
// through the outputs (kernels.h: check_*_status).
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/kernels.h"

namespace specdec::kernels::detail {

inline void cuda_check(cudaError_t err, const char* who, const char* what) {
  if (err != cudaSuccess) fail(who, ": ", what, " failed: ", cudaGetErrorString(err));
}

// Launchers need a device; without one they fail with the reason instead of crashing.
// (cudaGetDeviceCount is a host-side query: no synchronisation.)
inline void require_device(const char* who) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0)
    fail(who, ": no CUDA device available (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")");
}

inline cudaStream_t stream_of(const CudaLaunch& launch) { return static_cast<cudaStream_t>(launch.stream); }

}  // namespace specdec::kernels::detail
