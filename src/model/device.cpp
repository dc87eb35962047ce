// Device names and the bridge to kernels::Backend (device.h).
#include "model/device.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/host_reads.h"

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

at::Tensor on_host(const at::Tensor& t) {
  count_host_read();
  if (t.is_cpu()) return t;
  at::Tensor host = t.cpu();  // waits for the stream: the queued checks' flags are in
  checks_after_read();
  return host;
}

at::Tensor to_host_async(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  host.copy_(t, /*non_blocking=*/true);
  return host;
}

at::Tensor to_device_async(const at::Tensor& t, const at::Device& device) {
  if (t.device() == device) return t;
  if (!t.is_cpu() || device.is_cpu()) return t.to(device);
  // The caching host allocator keeps the pinned block until the copy has left it.
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

namespace {
struct PendingCheck {
  at::Tensor bad, bad_host;  // [] bool on the device; its pinned host copy, filled asynchronously
  std::function<void()> on_bad;
};
thread_local std::vector<PendingCheck> t_pending;
}  // namespace

void check_later(const at::Tensor& bad, std::function<void()> on_bad) {
  if (bad.is_cpu()) {
    if (bad.item<bool>()) on_bad();
    return;
  }
  t_pending.push_back({bad, to_host_async(bad), std::move(on_bad)});
}

void checks_after_read(bool synced) {
  if (t_pending.empty()) return;
  std::vector<PendingCheck> pending;
  pending.swap(t_pending);
  if (!synced) {  // one read of all the flags
    std::vector<at::Tensor> flags;
    for (const PendingCheck& c : pending) flags.push_back(c.bad.view({1}));
    count_host_read();
    const at::Tensor host = at::cat(flags).cpu();
    for (size_t i = 0; i < pending.size(); ++i) pending[i].bad_host = host[i];
  }
  for (PendingCheck& c : pending)
    if (c.bad_host.item<bool>()) c.on_bad();
}

}  // namespace specdec::model
