// The CPU backend (backend.h): every pointer is host memory, so each call is the CPU launcher
// itself. Also the registry of process-wide backends, one per device.
#include "kernels/backend.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace specdec::kernels {

// kernels/cuda/backend_cuda.cu (CUDA builds); below otherwise.
std::shared_ptr<Backend> make_cuda_backend(int index);

namespace {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device{}; }
  void verify(const VerifyArgs& args) override { verify_cpu(args); }
  void verify_tree(const TreeVerifyArgs& args_in) override {
    TreeVerifyArgs args = args_in;
    std::vector<double> scratch;  // [B, V] residuals (sampling mode only)
    if (args.mode == VerifyMode::sampling && args.batch > 0 && args.vocab > 0) {
      scratch.resize(static_cast<size_t>(args.batch * args.vocab));
      args.scratch = scratch.data();
    }
    verify_tree_cpu(args);
  }
  void kv_compact(const CompactArgs& args) override { kv_compact_cpu(args); }
  void kv_reorder(float* dst, const float* src, const int64_t* indices, int64_t batch,
                  int64_t row_elems) override {
    kv_reorder_cpu(dst, src, indices, batch, row_elems);
  }
  void pick(const PickArgs& args) override { pick_cpu(args); }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

}  // namespace

#ifndef SPECDEC_WITH_CUDA
std::shared_ptr<Backend> make_cuda_backend(int index) {
  fail("device cuda:", index, ": this build of specdec has no CUDA (nvcc was not found when it was configured)");
}
#endif

std::string Device::str() const {
  return kind == Kind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

std::shared_ptr<Backend> backend_for(const Device& device) {
  static std::mutex mu;
  static std::map<int, std::shared_ptr<Backend>> cuda;  // by device ordinal
  static const std::shared_ptr<Backend> cpu = std::make_shared<CpuBackend>();
  if (device.kind == Device::Kind::cpu) return cpu;
  SD_CHECK(device.index >= 0, "device ", device.str(), ": negative CUDA device index");
  std::lock_guard<std::mutex> lock(mu);
  auto& b = cuda[device.index];
  if (!b) b = make_cuda_backend(device.index);
  return b;
}

}  // namespace specdec::kernels
