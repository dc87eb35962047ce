#pragma once
// Devices as the rest of specdec names them ("cpu", "cuda", "cuda:1"), and the bridge from a
// tensor's device to its kernels::Backend (kernels/backend.h).
#include <ATen/ATen.h>

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
// loop reads values, e.g. sampling a draft token).
at::Tensor on_host(const at::Tensor& t);

}  // namespace specdec::model
