// Device names and the bridge to kernels::Backend (device.h).
#include "model/device.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace specdec::model {

at::Device parse_device(const std::string& name, const std::string& what) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "cuda") return at::Device(at::kCUDA);  // the current device
  const std::string prefix = "cuda:";
  const std::string index = name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : "";
  // Up to 3 digits: a device index, never a number that overflows c10::DeviceIndex.
  const bool digits = !index.empty() && index.size() <= 3 &&
                      std::all_of(index.begin(), index.end(), [](unsigned char ch) { return std::isdigit(ch); });
  SD_CHECK(digits && std::stoi(index) <= 127, what, ": device '", name,
           "' is not valid (use cpu, cuda or cuda:N with N a device index)");
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(index)));
}

kernels::Device kernels_device(const at::Device& device) {
  if (device.is_cpu()) return kernels::Device{};
  SD_CHECK(device.is_cuda(), "device ", device.str(), ": only cpu and cuda devices are supported");
  return kernels::Device{kernels::Device::Kind::cuda, device.has_index() ? device.index() : 0};
}

std::shared_ptr<kernels::Backend> backend_of(const at::Device& device) {
  return kernels::backend_for(kernels_device(device));
}

at::Tensor on_host(const at::Tensor& t) { return t.is_cpu() ? t : t.cpu(); }

}  // namespace specdec::model
