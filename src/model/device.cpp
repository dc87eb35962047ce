// Device names and the bridge to kernels::Backend (device.h).
#include "model/device.h"

#include <cctype>

#include "core/error.h"

namespace specdec::model {

at::Device parse_device(const std::string& name, const std::string& what) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "cuda") return at::Device(at::kCUDA, 0);
  const std::string prefix = "cuda:";
  bool ok = name.size() > prefix.size() && name.size() <= prefix.size() + 4 &&
            name.compare(0, prefix.size(), prefix) == 0;
  for (size_t i = prefix.size(); ok && i < name.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(name[i]));
  SD_CHECK(ok, what, ": unknown device '", name, "' (expected cpu, cuda or cuda:N)");
  return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(std::stoi(name.substr(prefix.size()))));
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
