#pragma once
// A fixed-shape model step, captured once and replayed (DESIGN, "Performance": on a GPU a step
// must cost what its bytes and FLOPs cost, not its launches).
//
// The caller owns the step's buffers: it allocates its inputs on the device before the first
// run, writes each step's values into them with `upload`, and the step function reads only
// them (and weights, caches and tables whose addresses do not change). On CUDA, with a CUDA
// LibTorch, the first `run` warms the step up on a side stream and captures it as a CUDA graph
// (at::cuda::CUDAGraph, its own memory pool, so the tensors the step makes keep their addresses);
// every later `run` replays it: one launch for the whole step, no host synchronisation. Elsewhere
// (the CPU twin that CI runs, or a LibTorch without CUDA) `run` calls the step function itself,
// so both devices run the same code up to the capture.
#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace specdec::model {

class StepGraph {
 public:
  // `inputs`: the int64 device buffer the step reads; `upload` fills it.
  StepGraph(at::Device device, int64_t n_inputs);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  const at::Tensor& inputs() const { return inputs_; }  // [n_inputs] int64 on the device
  // Copies host values into inputs() without blocking the host (CUDA: through pinned memory,
  // after the previous upload has left it). values.size() == n_inputs.
  void upload(const std::vector<int64_t>& values);
  // First call: runs `step` (and captures it where graphs are available); later calls replay.
  // Returns false if capture failed (the step ran eagerly; the caller should stop using this
  // graph), with the reason in `why`.
  bool run(const std::function<void()>& step, std::string* why = nullptr);
  bool captured() const;
  // Whether run() captures on `device` in this build (CUDA device and a CUDA LibTorch).
  static bool captures_on(const at::Device& device);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  at::Tensor inputs_;
};

}  // namespace specdec::model
