#pragma once
// What differs between the CPU and a CUDA device for the decoding loop, behind one small
// interface: verifying a round and moving KV-cache entries. The loop itself (strategies/)
// and the models never call a *_cpu or *_cuda launcher directly; they ask the backend of the
// device their tensors live on. The CPU backend runs in every test; the CUDA backend is
// compiled in CI and runs on a GPU only in scripts/gpu_check.sh (results/gpu.md).
//
// Memory split, the same for both backends: the big arrays (target/draft probabilities, KV
// tensors) are in the device's memory; the small per-round arrays the host loop produces and
// consumes (draft tokens, counts, uniforms, index lists, the outputs) are host memory, but for
// a draft model's chain, whose tokens stay where it drew them until the verdict. A call
// returns with its outputs on the host, so the caller needs no synchronisation of its own.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace specdec::kernels {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // CUDA device ordinal
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device& o) const { return kind == o.kind && (kind == Kind::cpu || index == o.index); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Chain verification (kernels.h, VerifyArgs). args.p and args.q point to this device's
  // memory, and args.draft_tokens too when args.draft_tokens_on_device; every other pointer to
  // host memory. Bad input throws specdec::Error naming the entry, as verify_cpu does.
  virtual void verify(const VerifyArgs& args) = 0;
  // Token-tree verification with the same split (args.tokens in device memory when
  // args.tokens_on_device, args.parents when args.parents_on_device). args.scratch is ignored:
  // the backend brings its own residual buffer.
  virtual void verify_tree(const TreeVerifyArgs& args) = 0;
  // KV compaction: args.kv in device memory; src_pos, n_keep, dst_start and lengths on the host.
  virtual void kv_compact(const CompactArgs& args) = 0;
  // The same keep lists applied to every tensor in `layers` (device memory, each laid out as
  // args.kv, which is ignored): a whole cache in one call. This default compacts them one by
  // one; the CUDA backend stages the lists once and waits for the device once, not per tensor.
  virtual void kv_compact_layers(const CompactArgs& args, const std::vector<float*>& layers) {
    for (float* kv : layers) {
      CompactArgs a = args;
      a.kv = kv;
      kv_compact(a);
    }
  }
  // Beam reorder: dst and src in device memory, indices on the host.
  virtual void kv_reorder(float* dst, const float* src, const int64_t* indices, int64_t batch,
                          int64_t row_elems) = 0;
  // Token choice (kernels.h, PickArgs) with every pointer in this device's memory: queued, with
  // no wait, so the tokens can feed the device's next forward unread (a draft loop).
  virtual void pick(const PickArgs& args) = 0;
  // Copies `bytes` from this device's memory to host memory (waits for the device's work).
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
};

// The process-wide backend of a device, created on first use. The CPU backend always exists;
// asking for CUDA throws specdec::Error when this build has no CUDA or no such device exists.
std::shared_ptr<Backend> backend_for(const Device& device);

}  // namespace specdec::kernels
