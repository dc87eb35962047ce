// The CUDA backend (kernels/backend.h). Compiled in CI; it has never run on a GPU here.
//
// Each call stages the round's small host arrays (tokens, counts, uniforms, index lists) in
// pinned host memory, sends them with one asynchronous copy, launches the kernel on the
// stream with the backend's device workspace, copies the outputs back and waits for the
// stream once: the host loop needs the verdict before it can go on. Buffers grow when a call
// needs more and are then reused, so the steady state allocates nothing.
//
// The stream is the legacy default stream (nullptr), the one LibTorch's ops use unless a
// program sets another, so the probabilities a LibTorch op wrote are complete before our
// kernel reads them without any extra synchronisation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.cuh"

namespace specdec::kernels {
namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Makes `device` current for the lifetime of the guard (restores the previous one).
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* who) {
    detail::cuda_check(cudaGetDevice(&previous_), who, "cudaGetDevice");
    if (previous_ != device) detail::cuda_check(cudaSetDevice(device), who, "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// Host arrays laid out one after another (256-byte aligned) in a pinned buffer, mirrored at the
// same offsets in a device buffer: one copy moves them all.
class Staging {
 public:
  ~Staging() {
    if (host_) cudaFreeHost(host_);
    if (device_) cudaFree(device_);
  }
  // Starts a new layout.
  void reset() { used_ = 0; }
  // Reserves `bytes` and returns its offset.
  size_t add(size_t bytes) {
    const size_t at = used_;
    used_ += aligned(std::max<size_t>(bytes, 1));
    return at;
  }
  // Grows both buffers to the current layout (a no-op once they are large enough).
  void fit(const char* who) {
    if (used_ <= capacity_) return;
    if (host_) cudaFreeHost(host_);
    if (device_) cudaFree(device_);
    host_ = nullptr, device_ = nullptr, capacity_ = 0;
    detail::cuda_check(cudaMallocHost(&host_, used_), who, "cudaMallocHost (staging)");
    detail::cuda_check(cudaMalloc(&device_, used_), who, "cudaMalloc (staging)");
    capacity_ = used_;
  }
  template <class T>
  T* host(size_t offset) { return reinterpret_cast<T*>(static_cast<char*>(host_) + offset); }
  template <class T>
  T* device(size_t offset) { return reinterpret_cast<T*>(static_cast<char*>(device_) + offset); }
  // Copies host [from, to) to the device (to = the end of the inputs).
  void upload(size_t from, size_t to, cudaStream_t s, const char* who) {
    if (to > from)
      detail::cuda_check(cudaMemcpyAsync(device<char>(from), host<char>(from), to - from, cudaMemcpyHostToDevice, s),
                         who, "copy to the device");
  }
  void download(size_t from, size_t to, cudaStream_t s, const char* who) {
    if (to > from)
      detail::cuda_check(cudaMemcpyAsync(host<char>(from), device<char>(from), to - from, cudaMemcpyDeviceToHost, s),
                         who, "copy to the host");
  }
  size_t size() const { return used_; }

 private:
  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t used_ = 0, capacity_ = 0;
};

// Device scratch handed to the kernels as their workspace.
class Workspace {
 public:
  ~Workspace() {
    if (ptr_) cudaFree(ptr_);
  }
  CudaLaunch launch(size_t bytes, cudaStream_t stream, const char* who) {
    if (bytes > capacity_) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = nullptr, capacity_ = 0;
      detail::cuda_check(cudaMalloc(&ptr_, bytes), who, "cudaMalloc (workspace)");
      capacity_ = bytes;
    }
    CudaLaunch l;
    l.stream = stream;
    l.workspace = ptr_;
    l.workspace_bytes = capacity_;
    return l;
  }

 private:
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// Stages `n` host elements (or nothing for a null pointer) and returns the offset.
template <class T>
size_t stage(Staging& st, const T* src, int64_t n) {
  return st.add(src ? sizeof(T) * static_cast<size_t>(n) : 0);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    SD_CHECK(err == cudaSuccess && n > 0, "device cuda:", index, ": no CUDA device is available (",
             err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")");
    SD_CHECK(index < n, "device cuda:", index, ": only ", n, " CUDA device(s) present");
  }

  Device device() const override { return Device{Device::Kind::cuda, index_}; }

  void verify(const VerifyArgs& host) override {
    const char* who = "verify (cuda)";
    std::lock_guard<std::mutex> lock(mu_);
    const DeviceGuard guard(index_, who);
    const int64_t B = host.batch, G = host.gamma;
    Staging& st = staging_;
    st.reset();
    // Draft tokens already on the device (a draft model's unread chain) are read from there.
    const int32_t* staged_tokens = host.draft_tokens_on_device ? nullptr : host.draft_tokens;
    const size_t o_draft = stage(st, staged_tokens, B * G), o_n = stage(st, host.n_draft, B),
                 o_u = stage(st, host.uniforms, B * (G + 1));
    const size_t inputs_end = st.size();
    const size_t o_acc = st.add(sizeof(int32_t) * B), o_out = st.add(sizeof(int32_t) * B * (G + 1));
    st.fit(who);
    copy_in(st, staged_tokens, o_draft, B * G);
    copy_in(st, host.n_draft, o_n, B);
    copy_in(st, host.uniforms, o_u, B * (G + 1));
    VerifyArgs a = host;  // p and q already on the device
    a.draft_tokens = staged_tokens ? st.device<int32_t>(o_draft) : host.draft_tokens;
    a.n_draft = host.n_draft ? st.device<int32_t>(o_n) : nullptr;
    a.uniforms = host.uniforms ? st.device<double>(o_u) : nullptr;
    a.n_accepted = st.device<int32_t>(o_acc);
    a.out_tokens = st.device<int32_t>(o_out);
    st.upload(0, inputs_end, stream_, who);
    verify_cuda(a, workspace_.launch(verify_cuda_workspace_bytes(a), stream_, who));
    st.download(o_acc, st.size(), stream_, who);
    detail::cuda_check(cudaStreamSynchronize(stream_), who, "stream synchronisation");
    std::memcpy(host.n_accepted, st.host<int32_t>(o_acc), sizeof(int32_t) * B);
    std::memcpy(host.out_tokens, st.host<int32_t>(o_out), sizeof(int32_t) * B * (G + 1));
    check_verify_status(host.n_accepted, host.out_tokens, B, G + 1, who);
  }

  void verify_tree(const TreeVerifyArgs& host) override {
    const char* who = "verify_tree (cuda)";
    std::lock_guard<std::mutex> lock(mu_);
    const DeviceGuard guard(index_, who);
    const int64_t B = host.batch, N = host.max_nodes;
    Staging& st = staging_;
    st.reset();
    // Node tokens (and parents) already on the device (a tree drawn or grown there, unread) are
    // read from there.
    const int32_t* staged_tokens = host.tokens_on_device ? nullptr : host.tokens;
    const int32_t* staged_parents = host.parents_on_device ? nullptr : host.parents;
    const size_t o_tok = stage(st, staged_tokens, B * N), o_par = stage(st, staged_parents, B * N),
                 o_n = stage(st, host.n_nodes, B), o_u = stage(st, host.uniforms, B * (N + 1));
    const size_t inputs_end = st.size();
    const size_t o_acc = st.add(sizeof(int32_t) * B), o_path = st.add(sizeof(int32_t) * B * N),
                 o_out = st.add(sizeof(int32_t) * B * (N + 1));
    st.fit(who);
    copy_in(st, staged_tokens, o_tok, B * N);
    copy_in(st, staged_parents, o_par, B * N);
    copy_in(st, host.n_nodes, o_n, B);
    copy_in(st, host.uniforms, o_u, B * (N + 1));
    TreeVerifyArgs a = host;
    a.tokens = staged_tokens ? st.device<int32_t>(o_tok) : host.tokens;
    a.parents = staged_parents ? st.device<int32_t>(o_par) : host.parents;
    a.n_nodes = host.n_nodes ? st.device<int32_t>(o_n) : nullptr;
    a.uniforms = host.uniforms ? st.device<double>(o_u) : nullptr;
    a.scratch = nullptr;  // the residual lives in the workspace
    a.n_accepted = st.device<int32_t>(o_acc);
    a.path = st.device<int32_t>(o_path);
    a.out_tokens = st.device<int32_t>(o_out);
    st.upload(0, inputs_end, stream_, who);
    verify_tree_cuda(a, workspace_.launch(verify_tree_cuda_workspace_bytes(a), stream_, who));
    st.download(o_acc, st.size(), stream_, who);
    detail::cuda_check(cudaStreamSynchronize(stream_), who, "stream synchronisation");
    std::memcpy(host.n_accepted, st.host<int32_t>(o_acc), sizeof(int32_t) * B);
    std::memcpy(host.path, st.host<int32_t>(o_path), sizeof(int32_t) * B * N);
    std::memcpy(host.out_tokens, st.host<int32_t>(o_out), sizeof(int32_t) * B * (N + 1));
    check_tree_status(host.n_accepted, host.out_tokens, B, N + 1, who);
  }

  void kv_compact(const CompactArgs& host) override { kv_compact_layers(host, {host.kv}); }

  // One staging of the keep lists and one wait for all the tensors: a launch per tensor, each
  // with its own status section, and one download of the statuses at the end.
  void kv_compact_layers(const CompactArgs& host, const std::vector<float*>& layers) override {
    const char* who = "kv_compact (cuda)";
    if (layers.empty()) return;
    for (size_t l = 0; l < layers.size(); ++l) SD_CHECK(layers[l], who, ": layers[", l, "] is null");
    CompactArgs a = host;
    a.kv = layers[0];
    check_compact_args(a, who);  // index lists are on the host: checked before anything moves
    std::lock_guard<std::mutex> lock(mu_);
    const DeviceGuard guard(index_, who);
    const int64_t B = host.batch, L = static_cast<int64_t>(layers.size());
    Staging& st = staging_;
    st.reset();
    const size_t o_src = stage(st, host.src_pos, B * host.max_keep), o_n = stage(st, host.n_keep, B),
                 o_dst = stage(st, host.dst_start, B);
    const size_t inputs_end = st.size();
    const size_t status_bytes = kv_compact_cuda_workspace_bytes(a);
    const size_t o_status = st.add(status_bytes * static_cast<size_t>(L));
    st.fit(who);
    copy_in(st, host.src_pos, o_src, B * host.max_keep);
    copy_in(st, host.n_keep, o_n, B);
    copy_in(st, host.dst_start, o_dst, B);
    a.src_pos = st.device<int64_t>(o_src);
    a.n_keep = st.device<int32_t>(o_n);
    a.dst_start = st.device<int64_t>(o_dst);
    a.lengths = nullptr;  // set on the host below
    st.upload(0, inputs_end, stream_, who);
    const CudaLaunch all = workspace_.launch(status_bytes * static_cast<size_t>(L), stream_, who);
    for (int64_t l = 0; l < L; ++l) {
      a.kv = layers[l];
      CudaLaunch one = all;
      one.workspace = static_cast<char*>(all.workspace) + l * status_bytes;
      one.workspace_bytes = status_bytes;
      kv_compact_cuda(a, one);
    }
    download_status(st.host<char>(o_status), all.workspace, status_bytes * static_cast<size_t>(L), who);
    for (int64_t l = 0; l < L; ++l) check_compact_status(st.host<int32_t>(o_status + l * status_bytes), B, who);
    if (host.lengths)
      for (int64_t b = 0; b < B; ++b) host.lengths[b] = host.dst_start[b] + host.n_keep[b];
  }

  void kv_reorder(float* dst, const float* src, const int64_t* indices, int64_t batch, int64_t row_elems) override {
    const char* who = "kv_reorder (cuda)";
    for (int64_t b = 0; b < batch; ++b)
      SD_CHECK(indices[b] >= 0 && indices[b] < batch, who, ": indices[", b, "] = ", indices[b], " out of range [0, ",
               batch, ")");
    std::lock_guard<std::mutex> lock(mu_);
    const DeviceGuard guard(index_, who);
    Staging& st = staging_;
    st.reset();
    const size_t o_idx = st.add(sizeof(int64_t) * batch);
    const size_t inputs_end = st.size();
    const size_t status_bytes = kv_reorder_cuda_workspace_bytes(batch);
    const size_t o_status = st.add(status_bytes);
    st.fit(who);
    copy_in(st, indices, o_idx, batch);
    st.upload(0, inputs_end, stream_, who);
    const CudaLaunch launch = workspace_.launch(status_bytes, stream_, who);
    kv_reorder_cuda(dst, src, st.device<int64_t>(o_idx), batch, row_elems, launch);
    download_status(st.host<char>(o_status), launch.workspace, status_bytes, who);
    check_reorder_status(st.host<int32_t>(o_status), batch, who);
  }

  void pick(const PickArgs& args) override {
    const char* who = "pick (cuda)";
    const DeviceGuard guard(index_, who);
    CudaLaunch launch;
    launch.stream = stream_;
    pick_cuda(args, launch);
  }

  void to_host(void* dst, const void* src, size_t bytes) override {
    const char* who = "to_host (cuda)";
    const DeviceGuard guard(index_, who);
    detail::cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), who, "copy to the host");
    detail::cuda_check(cudaStreamSynchronize(stream_), who, "stream synchronisation");
  }

 private:
  // Copies a kernel's status words from the workspace into pinned host memory and waits for
  // the stream (the caller needs them, and the kernel's other effects, before going on).
  void download_status(void* host_dst, const void* workspace, size_t bytes, const char* who) {
    if (bytes > 0)
      detail::cuda_check(cudaMemcpyAsync(host_dst, workspace, bytes, cudaMemcpyDeviceToHost, stream_), who,
                         "copy the status to the host");
    detail::cuda_check(cudaStreamSynchronize(stream_), who, "stream synchronisation");
  }
  template <class T>
  static void copy_in(Staging& st, const T* src, size_t offset, int64_t n) {
    if (src) std::memcpy(st.host<T>(offset), src, sizeof(T) * static_cast<size_t>(n));
  }

  int index_;
  cudaStream_t stream_ = nullptr;  // the legacy default stream (see the top of this file)
  std::mutex mu_;                  // one round at a time per device: the buffers are shared
  Staging staging_;
  Workspace workspace_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int index) { return std::make_shared<CudaBackend>(index); }

}  // namespace specdec::kernels
