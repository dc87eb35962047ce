#pragma once
// Every read of device data by the host in the decoding loop is counted here: on a GPU each is
// a round trip that stalls the stream (DESIGN, "Performance"). model::on_host (tensors) and the
// verification's verdict (speculative/verifier.cpp) count one read each, on every device, so
// that the CPU twin in CI counts what a GPU would pay. Per thread: a generation runs on one.
#include <cstdint>

namespace specdec {

inline thread_local int64_t t_host_reads = 0;

inline void count_host_read() { ++t_host_reads; }
inline int64_t host_reads() { return t_host_reads; }

}  // namespace specdec
