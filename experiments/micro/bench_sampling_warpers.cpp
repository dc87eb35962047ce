// The sampling warpers on the CPU (sampling::probabilities: temperature 0.8, then one warper),
// at SmolLM2's and Qwen2.5's vocabularies, 1 row (a sampled step) and 5 (a chain of 4's verify
// rows). The scores are normal with a spread of 4 (a peaked row: a nucleus of a few tokens at
// top_p 0.9) or 1 (a flat one: thousands).
//   build/bench/bench_sampling_warpers --benchmark_min_time=0.3 --benchmark_repetitions=3 \
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "sampling/processors.h"

namespace ss = specdec::sampling;

namespace {

// range(0): V; range(1): rows; range(2): the scores' spread; range(3): 0 temperature alone,
// 1 top_p 0.9, 2 top_k 50, 3 min_p 0.05.
void BM_Warp(benchmark::State& st) {
  at::manual_seed(5);
  const at::Tensor logits = at::randn({st.range(1), st.range(0)}) * static_cast<double>(st.range(2));
  ss::ProcessorConfig cfg;
  cfg.temperature = 0.8;
  if (st.range(3) == 1) cfg.top_p = 0.9;
  if (st.range(3) == 2) cfg.top_k = 50;
  if (st.range(3) == 3) cfg.min_p = 0.05;
  for (auto _ : st) benchmark::DoNotOptimize(ss::probabilities(logits, cfg, {}));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "rows", "spread", "warper"});
  for (int64_t V : {49152, 151936})
    for (int64_t rows : {1, 5})
      for (int64_t spread : {4, 1})
        for (int64_t warper : {0, 1, 2, 3}) b->Args({V, rows, spread, warper});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Warp)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
