// CUDA kernels against the CPU implementation on shared inputs (bit-identical outputs are
// expected: both run the same kernels/*_math.h row logic): chain verification in all four
// modes (block included) with ragged drafts, tree verification, KV compaction and reorder,
// each on a caller stream with a caller workspace. Without a GPU these tests skip with the
// reason; they are still compiled and linked in every build with nvcc. The host-side
// contract (workspace sizes, status checks, check_compact_args) is tested everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/backend.h"
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

// A device workspace of the bytes an op asks for, and a stream of its own (so the tests
// exercise a non-default stream; the caller synchronises before reading back).
struct DeviceLaunch {
  DeviceBuffer<char> ws;
  cudaStream_t stream = nullptr;
  explicit DeviceLaunch(size_t bytes) : ws(std::vector<char>(bytes, 0)) {
    if (cudaStreamCreate(&stream) != cudaSuccess) throw specdec::Error("cudaStreamCreate failed");
  }
  ~DeviceLaunch() { cudaStreamDestroy(stream); }
  sk::CudaLaunch launch() const { return sk::CudaLaunch{stream, ws.ptr, ws.n}; }
  void sync() const {
    if (cudaStreamSynchronize(stream) != cudaSuccess) throw specdec::Error("cudaStreamSynchronize failed");
  }
};
#endif

// Expects fn to throw specdec::Error whose message contains `fragment`.
template <class Fn>
void expect_error(Fn fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error (expected one naming '" << fragment << "')";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

struct VerifyInputs {
  int64_t B, G, V;
  std::vector<int32_t> draft, n_draft;
  std::vector<float> q, p;
  std::vector<double> u;
};

VerifyInputs random_inputs(int64_t B, int64_t G, int64_t V, uint64_t seed) {
  specdec::Rng rng(seed);
  VerifyInputs in{B, G, V, std::vector<int32_t>(B * G), std::vector<int32_t>(B), std::vector<float>(B * G * V),
                  std::vector<float>(B * (G + 1) * V), std::vector<double>(B * (G + 1))};
  for (auto* buf : {&in.q, &in.p})
    for (size_t r = 0; r < buf->size() / V; ++r) {
      double s = 0;  // peaked rows so that drafts from the top tokens are often accepted
      for (int64_t i = 0; i < V; ++i) s += ((*buf)[r * V + i] = std::pow(rng.uniformf(), 30.0f));
      for (int64_t i = 0; i < V; ++i) (*buf)[r * V + i] = static_cast<float>((*buf)[r * V + i] / s);
    }
  for (auto& x : in.draft) x = static_cast<int32_t>(rng.next() % V);
  for (auto& x : in.n_draft) x = static_cast<int32_t>(rng.next() % (G + 1));
  for (auto& x : in.u) x = rng.uniform();
  return in;
}

// Random trees in topological order (each parent uniform among the root and earlier nodes),
// node tokens the argmax of their q row half the time (so that some paths go deep).
struct TreeInputs {
  int64_t B, N, V;
  std::vector<int32_t> tokens, parents, n_nodes;
  std::vector<float> q, p;
  std::vector<double> u;
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
  // A workspace of the right size (never touched: the launchers stop before any launch).
  std::vector<double> fake_ws(4096);
  const sk::CudaLaunch launch{nullptr, fake_ws.data(), sizeof(double) * fake_ws.size()};
  ASSERT_LE(sk::verify_cuda_workspace_bytes(a), launch.workspace_bytes);
  expect_error([&] { sk::verify_cuda(a, launch); }, "CUDA");
  std::vector<float> kv(4), dst(4);
  std::vector<int64_t> idx = {0};
  expect_error([&] { sk::kv_reorder_cuda(dst.data(), kv.data(), idx.data(), 1, 4, launch); }, "CUDA");
  sk::CompactArgs c;
  EXPECT_THROW(sk::kv_compact_cuda(c, launch), specdec::Error);
  TreeInputs t = random_tree_inputs(1, 4, 8, 2);
  std::vector<int32_t> path(4), tree_out(5);
  sk::TreeVerifyArgs ta = tree_args(t, sk::VerifyMode::greedy, n_acc.data(), path.data(), tree_out.data());
  expect_error([&] { sk::verify_tree_cuda(ta, launch); }, "CUDA");
  std::vector<int64_t> picked(1);
  sk::PickArgs pa;
  pa.rows = 1, pa.vocab = 8, pa.scores = in.p.data(), pa.out_tokens = picked.data();
  expect_error([&] { sk::pick_cuda(pa, launch); }, "CUDA");
}

TEST(KernelsCuda, WorkspaceSizesAndTooSmallWorkspace) {
  // Host-side: the sizes follow the mode, and a launch whose workspace is short (or null)
  // is a named error before anything is queued, with or without a device.
  VerifyInputs in = random_inputs(3, 4, 1000, 2);
  std::vector<int32_t> n_acc(3), out(3 * 5);
  sk::VerifyArgs a;
  a.batch = 3, a.gamma = 4, a.vocab = 1000;
  a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.q = in.q.data(), a.p = in.p.data();
  a.uniforms = in.u.data(), a.n_accepted = n_acc.data(), a.out_tokens = out.data();
  a.mode = sk::VerifyMode::greedy;
  const size_t greedy = sk::verify_cuda_workspace_bytes(a);
  EXPECT_GE(greedy, sizeof(int32_t) * 3 * 5);
  a.mode = sk::VerifyMode::sampling;
  const size_t sampling = sk::verify_cuda_workspace_bytes(a);
  EXPECT_GE(sampling, sizeof(double) * 3 * 5 * 256);  // lane masses of every (b, row)
  a.mode = sk::VerifyMode::block;
  EXPECT_EQ(sk::verify_cuda_workspace_bytes(a), sampling);
  TreeInputs t = random_tree_inputs(2, 3, 50, 3);
  std::vector<int32_t> t_acc(2), t_path(6), t_out(8);
  sk::TreeVerifyArgs ta = tree_args(t, sk::VerifyMode::sampling, t_acc.data(), t_path.data(), t_out.data());
  EXPECT_EQ(sk::verify_tree_cuda_workspace_bytes(ta), 0u);  // caller's scratch
  ta.scratch = nullptr;
  EXPECT_GE(sk::verify_tree_cuda_workspace_bytes(ta), sizeof(double) * 2 * 50);
  sk::CompactArgs c;
  c.batch = 5;
  EXPECT_GE(sk::kv_compact_cuda_workspace_bytes(c), sizeof(int32_t) * 10);
  EXPECT_GE(sk::kv_reorder_cuda_workspace_bytes(7), sizeof(int32_t) * 7);
#ifndef SPECDEC_WITH_CUDA
  GTEST_SKIP() << skip_reason() << " (the launchers' workspace checks need the CUDA build)";
#else
  std::vector<double> host_ws(sampling / sizeof(double) + 1);
  const sk::CudaLaunch short_ws{nullptr, host_ws.data(), sampling - 8};
  expect_error([&] { sk::verify_cuda(a, short_ws); }, "verify_cuda: workspace of");
  expect_error([&] { sk::verify_cuda(a, sk::CudaLaunch{}); }, "too small");
  const sk::CudaLaunch null_ws{nullptr, nullptr, sampling};
  expect_error([&] { sk::verify_cuda(a, null_ws); }, "workspace is null");
  expect_error([&] { sk::verify_tree_cuda(ta, sk::CudaLaunch{}); }, "verify_tree_cuda: workspace of");
  std::vector<float> kv(8), dst(8);
  std::vector<int64_t> idx = {0, 1};
  expect_error([&] { sk::kv_reorder_cuda(dst.data(), kv.data(), idx.data(), 2, 4, sk::CudaLaunch{}); },
               "kv_reorder_cuda: workspace of");
#endif
}

TEST(KernelsCuda, HostStatusChecksNameTheEntry) {
  // Runs everywhere: the helpers the CUDA caller applies to its copied-back outputs name the
  // sequence and entry, with the CPU path's messages (kv_compact_cpu uses check_compact_args).
  std::vector<int32_t> acc = {2, 1, 0}, out(3 * 4, 7);
  EXPECT_NO_THROW(sk::check_verify_status(acc.data(), out.data(), 3, 4, "caller"));
  acc[1] = -2, out[1 * 4] = 3;  // kBadToken at draft position 3
  expect_error([&] { sk::check_verify_status(acc.data(), out.data(), 3, 4, "caller"); },
               "caller: draft_tokens[1][3]");
  acc[1] = -3, out[1 * 4] = 2;
  expect_error([&] { sk::check_verify_status(acc.data(), out.data(), 3, 4, "caller"); }, "uniforms[1][2]");
  acc[1] = -5, out[1 * 4] = 2;
  expect_error([&] { sk::check_tree_status(acc.data(), out.data(), 3, 4, "caller"); }, "parents[1][2]");
  expect_error([&] { sk::check_verify_status(nullptr, out.data(), 3, 4, "caller"); }, "null");

  // The CPU path gives the same message for the same bad token.
  VerifyInputs in = random_inputs(2, 2, 8, 3);
  in.n_draft = {2, 2};
  in.draft[3] = 8;
  std::vector<int32_t> n_acc(2), toks(6);
  sk::VerifyArgs a;
  a.batch = 2, a.gamma = 2, a.vocab = 8, a.mode = sk::VerifyMode::greedy;
  a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.p = in.p.data();
  a.n_accepted = n_acc.data(), a.out_tokens = toks.data();
  expect_error([&] { sk::verify_cpu(a); }, "verify_cpu: draft_tokens[1][1]");
  EXPECT_GE(n_acc[0], 0);
  EXPECT_LT(n_acc[1], 0);

  // Compaction arguments validated on the host, and the kernel's status words.
  std::vector<float> kv(2 * 1 * 8 * 2);
  std::vector<int64_t> src = {2, 3, 4, 6}, dst_start = {1, 0};
  std::vector<int32_t> n_keep = {2, 2};
  sk::CompactArgs c;
  c.kv = kv.data(), c.batch = 2, c.heads = 1, c.max_seq = 8, c.head_dim = 2;
  c.src_pos = src.data(), c.n_keep = n_keep.data(), c.dst_start = dst_start.data(), c.max_keep = 2;
  EXPECT_NO_THROW(sk::check_compact_args(c, "caller"));
  src[3] = 4;  // sequence 1: not strictly ascending
  expect_error([&] { sk::check_compact_args(c, "caller"); }, "caller: src_pos[1][1]");
  src[3] = 6, n_keep[0] = 3;
  expect_error([&] { sk::check_compact_args(c, "caller"); }, "n_keep[0]");
  n_keep[0] = 2, c.n_keep = nullptr;
  expect_error([&] { sk::check_compact_args(c, "caller"); }, "must not be null");
  const std::vector<int32_t> status = {0, -1, -3, 1};  // sequence 1: kBadSrcPos at 1
  expect_error([&] { sk::check_compact_status(status.data(), 2, "caller"); }, "src_pos[1][1]");
  const std::vector<int32_t> reorder_status = {0, 0, 1};
  expect_error([&] { sk::check_reorder_status(reorder_status.data(), 3, "caller"); }, "indices[2]");
}

TEST(KernelsCuda, VerifyMatchesCpu) {
  // Token-exact against verify_cpu for the same uniforms, every mode, ragged n_draft (0..gamma
  // at random, plus an all-empty and an all-full sequence), vocabularies below, at and far
  // above the block's 256 lanes.
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (int64_t V : {16, 256, 1000, 151936}) {
    VerifyInputs in = random_inputs(9, 5, V, 40 + V);
    in.n_draft[0] = 0, in.n_draft[1] = 5;
    for (int64_t b = 2; b < 4; ++b)  // drafts from p's top token: long acceptances
      for (int64_t i = 0; i < in.G; ++i) {
        const float* row = in.p.data() + (b * (in.G + 1) + i) * V;
        int32_t best = 0;
        for (int32_t k = 1; k < V; ++k) best = row[k] > row[best] ? k : best;
        in.draft[b * in.G + i] = best;
      }
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only,
                      sk::VerifyMode::block}) {
      std::vector<int32_t> acc_cpu(in.B), out_cpu(in.B * (in.G + 1));
      sk::VerifyArgs a;
      a.batch = in.B, a.gamma = in.G, a.vocab = V, a.mode = mode;
      a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.q = in.q.data(), a.p = in.p.data();
      a.uniforms = in.u.data(), a.n_accepted = acc_cpu.data(), a.out_tokens = out_cpu.data();
      sk::verify_cpu(a);
      DeviceBuffer<int32_t> d_draft(in.draft), d_nd(in.n_draft), d_acc(std::vector<int32_t>(in.B, -9)),
          d_out(std::vector<int32_t>(out_cpu.size(), -9));
      DeviceBuffer<float> d_q(in.q), d_p(in.p);
    DeviceBuffer<double> d_u(in.u);
      a.draft_tokens = d_draft.ptr, a.n_draft = d_nd.ptr, a.q = d_q.ptr, a.p = d_p.ptr, a.uniforms = d_u.ptr;
      a.n_accepted = d_acc.ptr, a.out_tokens = d_out.ptr;
      // Garbage in the workspace must not matter: the row kernel writes what the walk reads.
      DeviceLaunch dl(sk::verify_cuda_workspace_bytes(a));
      cudaMemset(dl.ws.ptr, 0x7f, dl.ws.n);
      sk::verify_cuda(a, dl.launch());
      dl.sync();
      const std::vector<int32_t> acc = d_acc.to_host(), out = d_out.to_host();
      EXPECT_NO_THROW(sk::check_verify_status(acc.data(), out.data(), in.B, in.G + 1, "verify_cuda"));
      EXPECT_EQ(acc, acc_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
      EXPECT_EQ(out, out_cpu) << "V = " << V << " mode " << static_cast<int>(mode);
    }
  }
#endif
}

TEST(KernelsCuda, PickMatchesCpu) {
  // The draft loop's token choice on the device: token-exact against pick_cpu, argmax and draws,
  // below, at and far above the block's 256 lanes, with a row of no mass (-1 on both).
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (int64_t V : {16, 256, 1000, 151936}) {
    const VerifyInputs in = random_inputs(3, 2, V, 70 + V);  // p: 9 probability rows of V
    std::vector<float> scores(in.p.begin(), in.p.end());
    std::fill(scores.begin() + 4 * V, scores.begin() + 5 * V, 0.0f);  // row 4: no mass
    const int64_t R = static_cast<int64_t>(scores.size()) / V;
    std::vector<double> u(R);
    specdec::Rng rng(V);
    for (double& x : u) x = rng.uniform();
    for (bool draw : {false, true}) {
      std::vector<int64_t> cpu(R, -9);
      sk::PickArgs a;
      a.rows = R, a.vocab = V, a.scores = scores.data(), a.uniforms = draw ? u.data() : nullptr;
      a.out_tokens = cpu.data();
      sk::pick_cpu(a);
      DeviceBuffer<float> d_scores(scores);
      DeviceBuffer<double> d_u(u);
      DeviceBuffer<int64_t> d_out(std::vector<int64_t>(R, -9));
      a.scores = d_scores.ptr, a.uniforms = draw ? d_u.ptr : nullptr, a.out_tokens = d_out.ptr;
      DeviceLaunch dl(0);
      sk::pick_cuda(a, dl.launch());
      dl.sync();
      EXPECT_EQ(d_out.to_host(), cpu) << "V = " << V << (draw ? " draws" : " argmax");
      if (draw) EXPECT_EQ(cpu[4], -1);
    }
  }
#endif
}

TEST(KernelsCuda, VerifyBadInputComesBackThroughTheOutputs) {
  // Bad data is found on the device; the launch itself does not throw or synchronise, and
  // check_verify_status on the copied outputs names the entry. The good sequence is complete.
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::block}) {
    VerifyInputs in = random_inputs(2, 2, 8, 3);
    in.n_draft = {2, 2};
    in.draft[3] = 8;  // sequence 1, position 1: outside [0, 8)
    std::vector<int32_t> acc_cpu(2), out_cpu(6);
    sk::VerifyArgs a;
    a.batch = 2, a.gamma = 2, a.vocab = 8, a.mode = mode;
    a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.q = in.q.data(), a.p = in.p.data();
    a.uniforms = in.u.data(), a.n_accepted = acc_cpu.data(), a.out_tokens = out_cpu.data();
    EXPECT_THROW(sk::verify_cpu(a), specdec::Error);
    DeviceBuffer<int32_t> d_draft(in.draft), d_nd(in.n_draft), d_acc(std::vector<int32_t>(2)),
        d_out(std::vector<int32_t>(6));
    DeviceBuffer<float> d_q(in.q), d_p(in.p);
    DeviceBuffer<double> d_u(in.u);
    a.draft_tokens = d_draft.ptr, a.n_draft = d_nd.ptr, a.q = d_q.ptr, a.p = d_p.ptr, a.uniforms = d_u.ptr;
    a.n_accepted = d_acc.ptr, a.out_tokens = d_out.ptr;
    DeviceLaunch dl(sk::verify_cuda_workspace_bytes(a));
    EXPECT_NO_THROW(sk::verify_cuda(a, dl.launch()));
    dl.sync();
    const std::vector<int32_t> acc = d_acc.to_host(), out = d_out.to_host();
    EXPECT_EQ(acc, acc_cpu);
    EXPECT_EQ(out, out_cpu);
    expect_error([&] { sk::check_verify_status(acc.data(), out.data(), 2, 3, "verify_cuda"); },
                 "verify_cuda: draft_tokens[1][1]");
  }
#endif
}

TEST(KernelsCuda, TreeVerifyMatchesCpu) {
  // Same trees, rows and uniforms on both paths, all three tree modes: identical counts,
  // paths and tokens (the sampling mode's running residual lives in caller scratch, or in
  // the workspace when scratch is null).
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  for (int64_t V : {16, 1000, 151936}) {
    TreeInputs t = random_tree_inputs(6, 12, V, 70 + V);
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only})
      for (bool own_scratch : {true, false}) {
        std::vector<int32_t> acc_cpu(t.B), path_cpu(t.B * t.N), out_cpu(t.B * (t.N + 1));
        sk::TreeVerifyArgs a = tree_args(t, mode, acc_cpu.data(), path_cpu.data(), out_cpu.data());
        sk::verify_tree_cpu(a);
        DeviceBuffer<int32_t> d_tok(t.tokens), d_par(t.parents), d_nn(t.n_nodes), d_acc(acc_cpu),
            d_path(path_cpu), d_out(out_cpu);
        DeviceBuffer<float> d_q(t.q), d_p(t.p);
        DeviceBuffer<double> d_u(t.u);
        DeviceBuffer<double> d_scratch(t.scratch);
        a.tokens = d_tok.ptr, a.parents = d_par.ptr, a.n_nodes = d_nn.ptr, a.q = d_q.ptr, a.p = d_p.ptr;
        a.uniforms = d_u.ptr, a.scratch = own_scratch ? d_scratch.ptr : nullptr;
        a.n_accepted = d_acc.ptr, a.path = d_path.ptr, a.out_tokens = d_out.ptr;
        DeviceLaunch dl(sk::verify_tree_cuda_workspace_bytes(a));
        sk::verify_tree_cuda(a, dl.launch());
        dl.sync();
        const std::string what = "V = " + std::to_string(V) + " mode " + std::to_string(static_cast<int>(mode)) +
                                 (own_scratch ? " scratch" : " workspace");
        EXPECT_EQ(d_acc.to_host(), acc_cpu) << what;
        EXPECT_EQ(d_path.to_host(), path_cpu) << what;
        EXPECT_EQ(d_out.to_host(), out_cpu) << what;
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
  DeviceLaunch dl(sk::verify_tree_cuda_workspace_bytes(a));
  sk::verify_tree_cuda(a, dl.launch());
  dl.sync();
  const std::vector<int32_t> h_acc = d_acc.to_host(), h_out = d_out.to_host();
  expect_error([&] { sk::check_tree_status(h_acc.data(), h_out.data(), 2, 4, "verify_tree_cuda"); },
               "parents[1][2]");
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
  sk::check_compact_args(c, "caller");  // what a caller does before copying to the device
  sk::kv_compact_cpu(c);
  DeviceBuffer<float> d_kv(kv);
  DeviceBuffer<int64_t> d_src(src_pos), d_dst(dst_start), d_len(std::vector<int64_t>(B, 0));
  DeviceBuffer<int32_t> d_nk(n_keep);
  c.kv = d_kv.ptr, c.src_pos = d_src.ptr, c.n_keep = d_nk.ptr, c.dst_start = d_dst.ptr, c.lengths = d_len.ptr;
  DeviceLaunch dl(sk::kv_compact_cuda_workspace_bytes(c));
  sk::kv_compact_cuda(c, dl.launch());
  dl.sync();
  EXPECT_EQ(d_kv.to_host(), kv_cpu);
  EXPECT_EQ(d_len.to_host(), len_cpu);
  std::vector<char> ws = dl.ws.to_host();
  std::vector<int32_t> status(2 * B);
  std::memcpy(status.data(), ws.data(), sizeof(int32_t) * status.size());
  EXPECT_NO_THROW(sk::check_compact_status(status.data(), B, "kv_compact_cuda"));

  // A keep list the caller did not validate: sequence 1 stays untouched, its length too, and
  // the status names the entry.
  std::vector<int64_t> bad_src = src_pos;
  bad_src[1 * max_keep + 1] = bad_src[1 * max_keep];  // not strictly ascending
  std::vector<int32_t> bad_nk = n_keep;
  bad_nk[1] = std::max(bad_nk[1], 2);
  DeviceBuffer<float> d_kv2(kv);
  DeviceBuffer<int64_t> d_src2(bad_src), d_len2(std::vector<int64_t>(B, -1));
  DeviceBuffer<int32_t> d_nk2(bad_nk);
  c.kv = d_kv2.ptr, c.src_pos = d_src2.ptr, c.n_keep = d_nk2.ptr, c.lengths = d_len2.ptr;
  sk::kv_compact_cuda(c, dl.launch());
  dl.sync();
  const std::vector<float> kv2 = d_kv2.to_host();
  EXPECT_TRUE(std::equal(kv.begin() + 1 * H * S * D, kv.begin() + 2 * H * S * D, kv2.begin() + 1 * H * S * D));
  EXPECT_EQ(d_len2.to_host()[1], -1);
  ws = dl.ws.to_host();
  std::memcpy(status.data(), ws.data(), sizeof(int32_t) * status.size());
  expect_error([&] { sk::check_compact_status(status.data(), B, "kv_compact_cuda"); }, "src_pos[1][1]");

  const std::vector<int64_t> idx = {2, 0, 2};
  std::vector<float> dst_cpu(kv.size());
  sk::kv_reorder_cpu(dst_cpu.data(), kv.data(), idx.data(), B, H * S * D);
  DeviceBuffer<float> d_src_kv(kv), d_dst_kv(std::vector<float>(kv.size(), 0.0f));
  DeviceBuffer<int64_t> d_idx(idx);
  DeviceLaunch rl(sk::kv_reorder_cuda_workspace_bytes(B));
  sk::kv_reorder_cuda(d_dst_kv.ptr, d_src_kv.ptr, d_idx.ptr, B, H * S * D, rl.launch());
  rl.sync();
  EXPECT_EQ(d_dst_kv.to_host(), dst_cpu);
  std::vector<char> rws = rl.ws.to_host();
  std::vector<int32_t> rstatus(B);
  std::memcpy(rstatus.data(), rws.data(), sizeof(int32_t) * B);
  EXPECT_NO_THROW(sk::check_reorder_status(rstatus.data(), B, "kv_reorder_cuda"));
  DeviceBuffer<int64_t> d_bad_idx(std::vector<int64_t>{0, 3, 1});
  sk::kv_reorder_cuda(d_dst_kv.ptr, d_src_kv.ptr, d_bad_idx.ptr, B, H * S * D, rl.launch());
  rl.sync();
  rws = rl.ws.to_host();
  std::memcpy(rstatus.data(), rws.data(), sizeof(int32_t) * B);
  expect_error([&] { sk::check_reorder_status(rstatus.data(), B, "kv_reorder_cuda"); }, "indices[1]");
#endif
}

// A whole cache in one backend call (what KVCache::compact does on a device): the CUDA
// backend's kv_compact_layers stages the keep list once, launches per tensor and waits once;
// every tensor must come out as kv_compact_cpu leaves it, and the length is set. A bad list is
// a named error before anything moves.
TEST(KernelsCuda, BackendCompactsAllLayersInOneCallLikeTheCpu) {
  if (!sk::cuda_available()) GTEST_SKIP() << skip_reason();
#ifdef SPECDEC_WITH_CUDA
  const int64_t L = 5, H = 3, S = 48, D = 32;
  specdec::Rng rng(21);
  std::vector<std::vector<float>> host(L, std::vector<float>(H * S * D));
  for (auto& layer : host)
    for (auto& x : layer) x = rng.uniformf();
  std::vector<int64_t> keep = {12, 15, 16, 30, 41};
  int64_t start = 10, length = -1;
  int32_t n_keep = static_cast<int32_t>(keep.size());
  sk::CompactArgs c;
  c.batch = 1, c.heads = H, c.max_seq = S, c.head_dim = D;
  c.src_pos = keep.data(), c.n_keep = &n_keep, c.dst_start = &start, c.max_keep = n_keep;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dev;
  std::vector<float*> layers;
  for (const auto& layer : host) {
    dev.push_back(std::make_unique<DeviceBuffer<float>>(layer));
    layers.push_back(dev.back()->ptr);
  }
  c.lengths = &length;
  const auto backend = sk::backend_for(sk::Device{sk::Device::Kind::cuda, 0});
  backend->kv_compact_layers(c, layers);
  EXPECT_EQ(length, start + n_keep);
  for (int64_t l = 0; l < L; ++l) {
    std::vector<float> want = host[l];
    sk::CompactArgs one = c;
    one.kv = want.data();
    one.lengths = nullptr;
    sk::kv_compact_cpu(one);
    EXPECT_EQ(dev[l]->to_host(), want) << "layer " << l;
  }
  std::vector<int64_t> bad = {12, 12, 16, 30, 41};  // not strictly ascending
  c.src_pos = bad.data();
  const std::vector<float> before = dev[0]->to_host();
  expect_error([&] { backend->kv_compact_layers(c, layers); }, "src_pos[0][1]");
  EXPECT_EQ(dev[0]->to_host(), before);
#endif
}
