// CPU verification cost: V in {49152 (SmolLM2), 151936 (Qwen2.5)}, gamma in {1, 4, 8},
// B in {1, 8}, for greedy, sampling and tokens_only.
//   build/bench/bench_kernels_verify --benchmark_min_time=0.2
// Inputs are peaked random distributions (a few dominant tokens, like real LM outputs).
// Greedy drafts the argmax of p, so every row is accepted and gamma+1 argmaxes run (its
// worst case). Sampling/tokens_only draft from q with random uniforms: the cost is one
// residual or bonus sweep (sampling) or up to gamma+1 sample sweeps (tokens_only).
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
  std::vector<float> q, p, u;
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
            std::vector<float>(B * (G + 1) * V), std::vector<float>(B * (G + 1))};
  for (int64_t r = 0; r < B * G; ++r) fill_peaked(in.q.data() + r * V, V, rng);
  for (int64_t r = 0; r < B * (G + 1); ++r) fill_peaked(in.p.data() + r * V, V, rng);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < G; ++i) {
      const float* row = mode == sk::VerifyMode::greedy ? in.p.data() + (b * (G + 1) + i) * V
                                                        : in.q.data() + (b * G + i) * V;
      in.draft[b * G + i] = static_cast<int32_t>(specdec::kernels::math::argmax_row(row, V));
    }
  for (auto& x : in.u) x = rng.uniformf();
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
      for (int64_t B : {1, 8}) b->Args({V, G, B});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_verify, greedy, sk::VerifyMode::greedy)->Apply(verify_shapes);
BENCHMARK_CAPTURE(BM_verify, sampling, sk::VerifyMode::sampling)->Apply(verify_shapes);
BENCHMARK_CAPTURE(BM_verify, tokens_only, sk::VerifyMode::tokens_only)->Apply(verify_shapes);

}  // namespace

BENCHMARK_MAIN();
