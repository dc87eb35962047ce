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

// Keeps a serial loop over the kLanes lane values rolled in device code: nvcc unrolls
// constant 256-trip loops completely, which in a kernel that inlines several of them ran
// the verification kernel out of registers (255 + 3 KB of spills; rolled: 56, no spills)
// for no gain (one thread runs these loops while the others wait).
#if defined(__CUDA_ARCH__)
#define SD_NO_UNROLL _Pragma("unroll 1")
#else
#define SD_NO_UNROLL
#endif
