#pragma once
// Devices as the rest of specdec names them ("cpu", "cuda", "cuda:1"), and the bridge from a
// tensor's device to its kernels::Backend (kernels/backend.h).
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace specdec::model {

// ModelSpec::device: "cpu", "cuda" (the current CUDA device) or "cuda:N" -> at::Device.
// Anything else throws "<what>: device '<name>' is not valid ...".
at::Device parse_device(const std::string& name, const std::string& what = "model");

kernels::Device kernels_device(const at::Device& device);

// The backend that verifies and moves the data of tensors on `device`.
std::shared_ptr<kernels::Backend> backend_of(const at::Device& device);

// `t` itself when it is in host memory, else a host copy (for the few places where the host
// loop reads values, e.g. sampling a draft token). Every call counts as one host read
// (core/host_reads.h), on the CPU too: the loop's reads are the same on every device.
at::Tensor on_host(const at::Tensor& t);

// A host copy of `t` that needs no read of its own: queued now without blocking, complete once
// the loop's next read (on_host, or the verdict) has waited for the device. `t` itself on the
// CPU.
at::Tensor to_host_async(const at::Tensor& t);

// `t` on `device` without the host waiting: a host tensor bound for a CUDA device goes through
// pinned memory with a non-blocking copy (a plain copy from pageable memory waits for the
// stream, a stall as dear as a read). `t` itself when it is already there.
at::Tensor to_device_async(const at::Tensor& t, const at::Device& device);

// A check of device data that costs no read of its own. `bad` is a bool scalar on the
// device (true: the check failed); it comes to the host without blocking and is looked at after
// the loop's next read (on_host, or the verdict: verify_round calls checks_after_read), which
// waits for the device anyway. Then `on_bad` runs; it throws (a named error). On the CPU it runs
// at once.
void check_later(const at::Tensor& bad, std::function<void()> on_bad);
// Runs the checks queued by check_later, whose flags a read has just brought in (on_host calls
// it). `synced` false: nothing has waited for the device since (the end of a generation), so
// one read of the flags is made first.
void checks_after_read(bool synced = true);

}  // namespace specdec::model
