// Captured, replayed model steps (see step_graph.h). The CUDA half is compiled only against a
// CUDA LibTorch (SPECDEC_TORCH_CUDA, CMakeLists.txt); CI compiles it in its CUDA-LibTorch stage.
#include "model/step_graph.h"

#include <cstring>

#include "core/error.h"

#if SPECDEC_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace specdec::model {

struct StepGraph::Impl {
  at::Device device;
  int64_t n_inputs = 0;
  bool ran = false, captured = false;
#if SPECDEC_TORCH_CUDA
  at::Tensor staging;                          // [n_inputs] int64, pinned host memory
  at::cuda::CUDAEvent uploaded;                // the last upload has left `staging`
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  explicit Impl(at::Device d, int64_t n) : device(d), n_inputs(n) {}
};

bool StepGraph::captures_on(const at::Device& device) {
#if SPECDEC_TORCH_CUDA
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

StepGraph::StepGraph(at::Device device, int64_t n_inputs) : impl_(std::make_unique<Impl>(device, n_inputs)) {
  SD_CHECK(n_inputs > 0, "step graph: no inputs");
  inputs_ = at::zeros({n_inputs}, at::TensorOptions().dtype(at::kLong).device(device));
#if SPECDEC_TORCH_CUDA
  if (device.is_cuda()) impl_->staging = at::empty({n_inputs}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
#endif
}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return impl_->captured; }

void StepGraph::upload(const std::vector<int64_t>& values) {
  SD_CHECK(static_cast<int64_t>(values.size()) == impl_->n_inputs, "step graph: ", values.size(), " input values for ",
           impl_->n_inputs, " slots");
#if SPECDEC_TORCH_CUDA
  if (impl_->device.is_cuda()) {
    // The copy from pinned memory is queued on the stream and the host goes on; the host may
    // refill the staging buffer only once that copy has read it.
    impl_->uploaded.synchronize();
    std::memcpy(impl_->staging.data_ptr<int64_t>(), values.data(), values.size() * sizeof(int64_t));
    inputs_.copy_(impl_->staging, /*non_blocking=*/true);
    impl_->uploaded.record(at::cuda::getCurrentCUDAStream(impl_->device.index()));
    return;
  }
#endif
  std::memcpy(inputs_.data_ptr<int64_t>(), values.data(), values.size() * sizeof(int64_t));
}

bool StepGraph::run(const std::function<void()>& step, std::string* why) {
#if SPECDEC_TORCH_CUDA
  if (impl_->device.is_cuda()) {
    if (impl_->captured) {
      impl_->graph->replay();
      return true;
    }
    if (impl_->ran) {  // capture failed before: eager
      step();
      return false;
    }
    impl_->ran = true;
    const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(impl_->device.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, impl_->device.index());
    at::cuda::CUDAEvent ready;
    ready.record(main);
    ready.block(side);
    try {
      c10::cuda::CUDAStreamGuard guard(side);
      step();  // warm-up: lazy initialisation (cuBLAS handles, workspaces) must not be captured
      impl_->graph = std::make_unique<at::cuda::CUDAGraph>();
      impl_->graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        step();
      } catch (...) {
        try { impl_->graph->capture_end(); } catch (...) {}
        throw;
      }
      impl_->graph->capture_end();
      impl_->captured = true;
    } catch (const std::exception& e) {
      impl_->graph.reset();
      if (why) *why = e.what();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(main);
    if (!impl_->captured) {  // the step's outputs must come from a completed run on `main`
      step();
      return false;
    }
    impl_->graph->replay();  // the capture recorded the work; this runs it on this step's inputs
    return true;
  }
#endif
  (void)why;
  impl_->ran = true;
  step();
  return true;
}

}  // namespace specdec::model
