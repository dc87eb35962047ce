// The batch step's draft lengths (batch_lengths, speculative/controller.h): the host work that
// adaptive_gamma=cost adds to every step of a batched speculative decode, before any forward.
// B seats with mixed acceptance (a in [0.3, 0.95], seeded), each allowed up to `cap` draft
// tokens, a draft model's 0.5 ms a draft token, and a verify curve that is flat to 256 rows and
// then rises (a memory-bound CPU step turning compute-bound), so the search walks the whole
// path of lengths before it settles.
//
//   cmake --build build --target bench_strategies_batch_lengths
//   build/bench/bench_strategies_batch_lengths
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "speculative/controller.h"

namespace {

using specdec::strategies::BatchSeat;
using specdec::strategies::StepCosts;

void BM_BatchLengths(benchmark::State& state) {
  const auto batch = static_cast<size_t>(state.range(0));
  const int64_t cap = state.range(1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> accept(0.3, 0.95);
  std::vector<BatchSeat> seats(batch);
  for (BatchSeat& s : seats) s.cap = cap, s.a = accept(rng), s.m = 1, s.t_draft = 0.5, s.remaining = 100;
  StepCosts costs;
  costs.verify_ms = {{1, 10.0}, {256, 12.0}, {1024, 40.0}, {4096, 160.0}};
  int64_t drafted = 0;
  for (auto _ : state) {
    const std::vector<int64_t> g = specdec::strategies::batch_lengths(seats, costs);
    drafted = 0;
    for (int64_t x : g) drafted += x;
    benchmark::DoNotOptimize(drafted);
  }
  state.counters["drafted"] = static_cast<double>(drafted);
}
BENCHMARK(BM_BatchLengths)->ArgNames({"batch", "cap"})->Args({8, 8})->Args({64, 8})->Args({256, 8})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
