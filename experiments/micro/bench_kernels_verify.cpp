// CPU verification cost: V in {49152 (SmolLM2), 151936 (Qwen2.5)}, gamma in {1, 4, 8},
// B in {1, 8, 32}, for greedy, sampling, tokens_only and block; and token-tree verification of
// one sequence with N in {16, 32, 64} nodes at V = 49152.
//   build/bench/bench_kernels_verify --benchmark_min_time=0.2
// Inputs are peaked random distributions (a few dominant tokens, like real LM outputs).
// Greedy drafts the argmax of p, so every row is accepted and gamma+1 argmaxes run (its
// worst case). Sampling/tokens_only/block draft the argmax of q with random uniforms: the
// cost is one residual or bonus sweep (sampling), up to gamma+1 sample sweeps (tokens_only),
// or, as q and p are independent and the draft is mostly rejected, up to gamma - 1 residual
// mass sweeps plus the residual sample (block: its worst case).
// Trees: node i's parent is i / 4 - 1 (the root and the first nodes have 4 children). Greedy
// and tokens_only trees carry the argmax of the parent's p row in each first child (deep
// paths); sampling trees carry the argmax of each node's own q row, so all of the root's
// children are rejected: 3 in-place residual updates in scratch plus one residual sample.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace sk = specdec::kernels;

namespace {

struct Inputs {
  int64_t B, G, V;
  std::vector<int32_t> draft, n_draft, n_acc, out;
  std::vector<float> q, p;
  std::vector<double> u;
};

void fill_peaked(float* row, int64_t V, specdec::Rng& rng) {
  double s = 0;
  for (int64_t i = 0; i < V; ++i) s += (row[i] = std::pow(rng.uniformf(), 60.0f));
  for (int64_t i = 0; i < V; ++i) row[i] = static_cast<float>(row[i] / s);
}

Inputs make_inputs(int64_t B, int64_t G, int64_t V, sk::VerifyMode mode) {
  specdec::Rng rng(1234);
  Inputs in{B, G, V, std::vector<int32_t>(B * G), std::vector<int32_t>(B, static_cast<int32_t>(G)),
            std::vector<int32_t>(B), std::vector<int32_t>(B * (G + 1)), std::vector<float>(B * G * V),
            std::vector<float>(B * (G + 1) * V), std::vector<double>(B * (G + 1))};
  for (int64_t r = 0; r < B * G; ++r) fill_peaked(in.q.data() + r * V, V, rng);
  for (int64_t r = 0; r < B * (G + 1); ++r) fill_peaked(in.p.data() + r * V, V, rng);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < G; ++i) {
      const float* row = mode == sk::VerifyMode::greedy ? in.p.data() + (b * (G + 1) + i) * V
                                                        : in.q.data() + (b * G + i) * V;
      in.draft[b * G + i] = static_cast<int32_t>(specdec::kernels::math::argmax_row(row, V));
    }
  for (auto& x : in.u) x = rng.uniform();
  return in;
}

sk::VerifyArgs args_of(Inputs& in, sk::VerifyMode mode) {
  sk::VerifyArgs a;
  a.batch = in.B, a.gamma = in.G, a.vocab = in.V, a.mode = mode;
  a.draft_tokens = in.draft.data(), a.n_draft = in.n_draft.data(), a.q = in.q.data(), a.p = in.p.data();
  a.uniforms = in.u.data(), a.n_accepted = in.n_acc.data(), a.out_tokens = in.out.data();
  return a;
}

void BM_verify(benchmark::State& state, sk::VerifyMode mode) {
  const int64_t V = state.range(0), G = state.range(1), B = state.range(2);
  Inputs in = make_inputs(B, G, V, mode);
  const sk::VerifyArgs a = args_of(in, mode);
  for (auto _ : state) {
    sk::verify_cpu(a);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  int64_t accepted = 0;
  for (auto n : in.n_acc) accepted += n;
  state.counters["accepted_per_seq"] = static_cast<double>(accepted) / B;
}

void verify_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "gamma", "B"});
  for (int64_t V : {49152, 151936})
    for (int64_t G : {1, 4, 8})
      for (int64_t B : {1, 8, 32}) b->Args({V, G, B});  // B = 32: issue 15, item 6
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_verify, greedy, sk::VerifyMode::greedy)->Apply(verify_shapes);
BENCHMARK_CAPTURE(BM_verify, sampling, sk::VerifyMode::sampling)->Apply(verify_shapes);
BENCHMARK_CAPTURE(BM_verify, tokens_only, sk::VerifyMode::tokens_only)->Apply(verify_shapes);
BENCHMARK_CAPTURE(BM_verify, block, sk::VerifyMode::block)->Apply(verify_shapes);

// ---- token trees ---------------------------------------------------------------------------

struct TreeInputs {
  int64_t N, V;
  std::vector<int32_t> tokens, parents, n_nodes, n_acc, path, out;
  std::vector<float> q, p;
  std::vector<double> u;
  std::vector<double> scratch;
};

TreeInputs make_tree_inputs(int64_t N, int64_t V, sk::VerifyMode mode) {
  specdec::Rng rng(4321);
  TreeInputs in{N, V, std::vector<int32_t>(N), std::vector<int32_t>(N), std::vector<int32_t>(1, static_cast<int32_t>(N)),
                std::vector<int32_t>(1), std::vector<int32_t>(N), std::vector<int32_t>(N + 1),
                std::vector<float>(N * V), std::vector<float>((N + 1) * V), std::vector<double>(N + 1),
                std::vector<double>(V)};
  for (int64_t r = 0; r < N; ++r) fill_peaked(in.q.data() + r * V, V, rng);
  for (int64_t r = 0; r <= N; ++r) fill_peaked(in.p.data() + r * V, V, rng);
  for (int64_t i = 0; i < N; ++i) {
    const int32_t parent = static_cast<int32_t>(i / 4) - 1;
    const bool first_child = i == 0 || (i - 1) / 4 - 1 != parent;
    in.parents[i] = parent;
    const float* row = mode == sk::VerifyMode::sampling ? in.q.data() + i * V : in.p.data() + (parent + 1) * V;
    in.tokens[i] = mode == sk::VerifyMode::sampling || first_child
                       ? static_cast<int32_t>(specdec::kernels::math::argmax_row(row, V))
                       : static_cast<int32_t>(rng.next() % V);
  }
  for (auto& x : in.u) x = rng.uniform();
  return in;
}

void BM_verify_tree(benchmark::State& state, sk::VerifyMode mode) {
  const int64_t V = state.range(0), N = state.range(1);
  TreeInputs in = make_tree_inputs(N, V, mode);
  sk::TreeVerifyArgs a;
  a.batch = 1, a.max_nodes = N, a.vocab = V, a.mode = mode;
  a.tokens = in.tokens.data(), a.parents = in.parents.data(), a.n_nodes = in.n_nodes.data();
  a.q = in.q.data(), a.p = in.p.data(), a.uniforms = in.u.data(), a.scratch = in.scratch.data();
  a.n_accepted = in.n_acc.data(), a.path = in.path.data(), a.out_tokens = in.out.data();
  for (auto _ : state) {
    sk::verify_tree_cpu(a);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["accepted"] = in.n_acc[0];
}

void tree_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "N"});
  for (int64_t N : {16, 32, 64}) b->Args({49152, N});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_verify_tree, greedy, sk::VerifyMode::greedy)->Apply(tree_shapes);
BENCHMARK_CAPTURE(BM_verify_tree, sampling, sk::VerifyMode::sampling)->Apply(tree_shapes);
BENCHMARK_CAPTURE(BM_verify_tree, tokens_only, sk::VerifyMode::tokens_only)->Apply(tree_shapes);

}  // namespace

BENCHMARK_MAIN();
