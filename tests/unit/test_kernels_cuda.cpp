// CUDA kernels against the CPU implementation on shared inputs (bit-identical outputs are
// expected: both run the same kernels/*_math.h row logic): chain verification in all four
// modes (block included), tree verification, KV compaction and reorder. Without a GPU these
// tests skip with the reason; they are still compiled and linked in every build with nvcc,
// and the launcher-contract test runs everywhere.
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

// Random trees in topological order (each parent uniform among the root and earlier nodes),
// node tokens the argmax of their q row half the time (so that some paths go deep).
struct TreeInputs {
  int64_t B, N, V;
  std::vector<int32_t> tokens, parents, n_nodes;
  std::vector<float> q, p, u;
  std::vector<double> scratch;
};

TreeInputs random_tree_inputs(int64_t B, int64_t N, int64_t V, uint64_t seed) {
  const VerifyInputs rows = random_inputs(B, N, V, seed);  // q [B, N, V], p [B, N+1, V], u [B, N+1]
  specdec::Rng rng(seed + 1);
  TreeInputs t{B, N, V, std::vector<int32_t>(B * N), std::vector<int32_t>(B * N), std::vector<int32_t>(B),
               rows.q, rows.p, rows.u, std::vector<double>(B * V, 0.0)};
  for (int64_t b = 0; b < B; ++b) {
    t.n_nodes[b] = static_cast<int32_t>(rng.next() % (N + 1));
    for (int64_t i = 0; i < N; ++i) {
      t.parents[b * N + i] = static_cast<int32_t>(rng.next() % (i + 1)) - 1;
      const float* qrow = t.q.data() + (b * N + i) * V;
      int32_t best = 0;
      for (int32_t k = 1; k < V; ++k) best = qrow[k] > qrow[best] ? k : best;
      t.tokens[b * N + i] = rng.uniform() < 0.5 ? best : static_cast<int32_t>(rng.next() % V);
    }
  }
  return t;
}

sk::TreeVerifyArgs tree_args(TreeInputs& t, sk::VerifyMode mode, int32_t* n_acc, int32_t* path, int32_t* out) {
  sk::TreeVerifyArgs a;
  a.batch = t.B, a.max_nodes = t.N, a.vocab = t.V, a.mode = mode;
  a.tokens = t.tokens.data(), a.parents = t.parents.data(), a.n_nodes = t.n_nodes.data();
  a.q = t.q.data(), a.p = t.p.data(), a.uniforms = t.u.data(), a.scratch = t.scratch.data();
  a.n_accepted = n_acc, a.path = path, a.out_tokens = out;
  return a;
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
  TreeInputs t = random_tree_inputs(1, 4, 8, 2);
  std::vector<int32_t> path(4), tree_out(5);
  sk::TreeVerifyArgs ta = tree_args(t, sk::VerifyMode::greedy, n_acc.data(), path.data(), tree_out.data());
  try {
    sk::verify_tree_cuda(ta);
    ADD_FAILURE() << "verify_tree_cuda ran without a device";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

TEST(KernelsCuda, VerifyMatchesCpu) {
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (int64_t V : {16, 1000, 151936}) {
    const VerifyInputs in = random_inputs(8, 4, V, 40 + V);
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only,
                      sk::VerifyMode::block}) {
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

TEST(KernelsCuda, TreeVerifyMatchesCpu) {
  // Same trees, rows and uniforms on both paths, all three tree modes: identical counts,
  // paths and tokens (the sampling mode's running residual lives in device scratch).
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (int64_t V : {16, 1000, 151936}) {
    TreeInputs t = random_tree_inputs(6, 12, V, 70 + V);
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only}) {
      std::vector<int32_t> acc_cpu(t.B), path_cpu(t.B * t.N), out_cpu(t.B * (t.N + 1));
      sk::TreeVerifyArgs a = tree_args(t, mode, acc_cpu.data(), path_cpu.data(), out_cpu.data());
      sk::verify_tree_cpu(a);
      DeviceBuffer<int32_t> d_tok(t.tokens), d_par(t.parents), d_nn(t.n_nodes), d_acc(acc_cpu), d_path(path_cpu),
          d_out(out_cpu);
      DeviceBuffer<float> d_q(t.q), d_p(t.p), d_u(t.u);
      DeviceBuffer<double> d_scratch(t.scratch);
      a.tokens = d_tok.ptr, a.parents = d_par.ptr, a.n_nodes = d_nn.ptr, a.q = d_q.ptr, a.p = d_p.ptr;
      a.uniforms = d_u.ptr, a.scratch = d_scratch.ptr;
      a.n_accepted = d_acc.ptr, a.path = d_path.ptr, a.out_tokens = d_out.ptr;
      sk::verify_tree_cuda(a);
      EXPECT_EQ(d_acc.to_host(), acc_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
      EXPECT_EQ(d_path.to_host(), path_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
      EXPECT_EQ(d_out.to_host(), out_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
    }
  }
#endif
}

TEST(KernelsCuda, TreeBadParentIsAnError) {
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  TreeInputs t = random_tree_inputs(2, 3, 8, 5);
  t.n_nodes = {3, 3};
  t.parents[1 * 3 + 2] = 2;  // sequence 1, node 2: a parent must come before the node
  std::vector<int32_t> acc(2), path(6), out(8);
  DeviceBuffer<int32_t> d_tok(t.tokens), d_par(t.parents), d_nn(t.n_nodes), d_acc(acc), d_path(path), d_out(out);
  DeviceBuffer<float> d_p(t.p);
  sk::TreeVerifyArgs a;
  a.batch = 2, a.max_nodes = 3, a.vocab = 8, a.mode = sk::VerifyMode::greedy;
  a.tokens = d_tok.ptr, a.parents = d_par.ptr, a.n_nodes = d_nn.ptr, a.p = d_p.ptr;
  a.n_accepted = d_acc.ptr, a.path = d_path.ptr, a.out_tokens = d_out.ptr;
  try {
    sk::verify_tree_cuda(a);
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("parents[1][2]"), std::string::npos) << e.what();
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
