// CUDA kernels against the CPU implementation on shared inputs (bit-identical outputs are
// expected: both run the same kernels/*_math.h row logic). Without a GPU these tests skip
// with the reason; they are still compiled and linked in every build with nvcc, and the
// launcher-contract test runs everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

#ifdef SPECDEC_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace sk = specdec::kernels;

namespace {

const char* skip_reason() {
#ifdef SPECDEC_WITH_CUDA
  return "built with CUDA, but no CUDA device is present (cudaGetDeviceCount)";
#else
  return "built without CUDA (nvcc not found or -DSPECDEC_CUDA=OFF)";
#endif
}

#ifdef SPECDEC_WITH_CUDA
// Device copy of a host vector; copies back with to_host().
template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(const std::vector<T>& host) : n(host.size()) {
    if (cudaMalloc(&ptr, sizeof(T) * (n ? n : 1)) != cudaSuccess) throw specdec::Error("cudaMalloc failed");
    if (n) cudaMemcpy(ptr, host.data(), sizeof(T) * n, cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), ptr, sizeof(T) * n, cudaMemcpyDeviceToHost);
    return h;
  }
};
#endif

struct VerifyInputs {
  int64_t B, G, V;
  std::vector<int32_t> draft, n_draft;
  std::vector<float> q, p, u;
};

VerifyInputs random_inputs(int64_t B, int64_t G, int64_t V, uint64_t seed) {
  specdec::Rng rng(seed);
  VerifyInputs in{B, G, V, std::vector<int32_t>(B * G), std::vector<int32_t>(B), std::vector<float>(B * G * V),
                  std::vector<float>(B * (G + 1) * V), std::vector<float>(B * (G + 1))};
  for (auto* buf : {&in.q, &in.p})
    for (size_t r = 0; r < buf->size() / V; ++r) {
      double s = 0;  // peaked rows so that drafts from the top tokens are often accepted
      for (int64_t i = 0; i < V; ++i) s += ((*buf)[r * V + i] = std::pow(rng.uniformf(), 30.0f));
      for (int64_t i = 0; i < V; ++i) (*buf)[r * V + i] = static_cast<float>((*buf)[r * V + i] / s);
    }
  for (auto& x : in.draft) x = static_cast<int32_t>(rng.next() % V);
  for (auto& x : in.n_draft) x = static_cast<int32_t>(rng.next() % (G + 1));
  for (auto& x : in.u) x = rng.uniformf();
  return in;
}

}  // namespace

TEST(KernelsCuda, LaunchersExistAndFailCleanlyWithoutDevice) {
  EXPECT_EQ(sk::cuda_available(), sk::cuda_available());  // stable answer
  if (sk::cuda_available()) GTEST_SKIP() << "a CUDA device is present; covered by the comparisons";
  VerifyInputs in = random_inputs(1, 1, 8, 1);
  std::vector<int32_t> n_acc(1), out(2);
  sk::VerifyArgs a;
  a.gamma = 1, a.vocab = 8, a.mode = sk::VerifyMode::greedy;
  a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.p = in.p.data();
  a.n_accepted = n_acc.data(), a.out_tokens = out.data();
  try {
    sk::verify_cuda(a);
    ADD_FAILURE() << "verify_cuda ran without a device";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
  std::vector<float> kv(4), dst(4);
  std::vector<int64_t> idx = {0};
  EXPECT_THROW(sk::kv_reorder_cuda(dst.data(), kv.data(), idx.data(), 1, 4), specdec::Error);
  sk::CompactArgs c;
  EXPECT_THROW(sk::kv_compact_cuda(c), specdec::Error);
}

TEST(KernelsCuda, VerifyMatchesCpu) {
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (int64_t V : {16, 1000, 151936}) {
    const VerifyInputs in = random_inputs(8, 4, V, 40 + V);
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only}) {
      std::vector<int32_t> acc_cpu(in.B), out_cpu(in.B * (in.G + 1));
      sk::VerifyArgs a;
      a.batch = in.B, a.gamma = in.G, a.vocab = V, a.mode = mode;
      a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.q = in.q.data(), a.p = in.p.data();
      a.uniforms = in.u.data(), a.n_accepted = acc_cpu.data(), a.out_tokens = out_cpu.data();
      sk::verify_cpu(a);
      DeviceBuffer<int32_t> d_draft(in.draft), d_nd(in.n_draft), d_acc(acc_cpu), d_out(out_cpu);
      DeviceBuffer<float> d_q(in.q), d_p(in.p), d_u(in.u);
      a.draft_tokens = d_draft.ptr, a.n_draft = d_nd.ptr, a.q = d_q.ptr, a.p = d_p.ptr, a.uniforms = d_u.ptr;
      a.n_accepted = d_acc.ptr, a.out_tokens = d_out.ptr;
      sk::verify_cuda(a);
      EXPECT_EQ(d_acc.to_host(), acc_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
      EXPECT_EQ(d_out.to_host(), out_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
    }
  }
#endif
}

TEST(KernelsCuda, VerifyBadTokenIsAnError) {
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  VerifyInputs in = random_inputs(2, 2, 8, 3);
  in.n_draft = {2, 2};
  in.draft[3] = 8;  // sequence 1, position 1: outside [0, 8)
  std::vector<int32_t> acc(2), out(6);
  DeviceBuffer<int32_t> d_draft(in.draft), d_nd(in.n_draft), d_acc(acc), d_out(out);
  DeviceBuffer<float> d_p(in.p);
  sk::VerifyArgs a;
  a.batch = 2, a.gamma = 2, a.vocab = 8, a.mode = sk::VerifyMode::greedy;
  a.draft_tokens = d_draft.ptr, a.n_draft = d_nd.ptr, a.p = d_p.ptr, a.n_accepted = d_acc.ptr, a.out_tokens = d_out.ptr;
  try {
    sk::verify_cuda(a);
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft_tokens[1][1]"), std::string::npos) << e.what();
  }
#endif
}

TEST(KernelsCuda, CompactAndReorderMatchCpu) {
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  const int64_t B = 3, H = 4, S = 64, D = 64, max_keep = 16;
  specdec::Rng rng(12);
  std::vector<float> kv(B * H * S * D);
  for (auto& x : kv) x = rng.uniformf();
  std::vector<int64_t> src_pos(B * max_keep, 0), dst_start = {5, 0, 40}, len_cpu(B, 0);
  std::vector<int32_t> n_keep(B, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = dst_start[b]; s < S && n_keep[b] < max_keep; ++s)
      if (rng.uniform() < 0.5) src_pos[b * max_keep + n_keep[b]++] = s;
  std::vector<float> kv_cpu = kv;
  sk::CompactArgs c;
  c.kv = kv_cpu.data(), c.batch = B, c.heads = H, c.max_seq = S, c.head_dim = D;
  c.src_pos = src_pos.data(), c.n_keep = n_keep.data(), c.dst_start = dst_start.data();
  c.max_keep = max_keep, c.lengths = len_cpu.data();
  sk::kv_compact_cpu(c);
  DeviceBuffer<float> d_kv(kv);
  DeviceBuffer<int64_t> d_src(src_pos), d_dst(dst_start), d_len(std::vector<int64_t>(B, 0));
  DeviceBuffer<int32_t> d_nk(n_keep);
  c.kv = d_kv.ptr, c.src_pos = d_src.ptr, c.n_keep = d_nk.ptr, c.dst_start = d_dst.ptr, c.lengths = d_len.ptr;
  sk::kv_compact_cuda(c);
  EXPECT_EQ(d_kv.to_host(), kv_cpu);
  EXPECT_EQ(d_len.to_host(), len_cpu);

  const std::vector<int64_t> idx = {2, 0, 2};
  std::vector<float> dst_cpu(kv.size());
  sk::kv_reorder_cpu(dst_cpu.data(), kv.data(), idx.data(), B, H * S * D);
  DeviceBuffer<float> d_src_kv(kv), d_dst_kv(std::vector<float>(kv.size(), 0.0f));
  DeviceBuffer<int64_t> d_idx(idx);
  sk::kv_reorder_cuda(d_dst_kv.ptr, d_src_kv.ptr, d_idx.ptr, B, H * S * D);
  EXPECT_EQ(d_dst_kv.to_host(), dst_cpu);
#endif
}
