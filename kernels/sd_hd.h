#pragma once
// SD_HD marks per-row logic shared by the CPU implementations and the CUDA kernels
// (DESIGN principle 8): __host__ __device__ under nvcc, plain inline C++ otherwise, so
// the CPU unit tests execute exactly the code a GPU thread runs.
#if defined(__CUDACC__)
#define SD_HD __host__ __device__
// A host/device template may be instantiated with device-only helpers (block
// collectives); this silences nvcc's host-call check for those instantiations.
#define SD_HD_TEMPLATE_PRAGMA _Pragma("nv_exec_check_disable")
#else
#define SD_HD
#define SD_HD_TEMPLATE_PRAGMA
#endif
