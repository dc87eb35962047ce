// The batched target step of speculative decoding (issue 15, "batch > 1"): one ragged forward
// of B x (gamma + 1) rows against B separate (gamma + 1)-row forwards, on SmolLM2-135M-Instruct
// after a 128-token prefill per sequence (the cache is rolled back after each step, so the
// context stays constant).
//   build/bench/bench_model_batch_step --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// BM_batched_step/B/gamma: one forward, tokens [B, gamma + 1], every sequence feeding all rows.
// BM_ragged_step/B/gamma: the same with ragged fed counts (sequence b feeds 1 + b % (gamma + 1)
//   rows, as n-gram drafts of different lengths do): fewer rows, no padding computed.
// BM_separate_steps/B/gamma: B forwards of [1, gamma + 1], one per sequence's own cache.
// Both read the weights; the batched step reads them once per step instead of B times.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "core/rng.h"
#include "model/causal_lm.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace sm = specdec::model;

namespace {

constexpr int64_t kPrefill = 128;

std::shared_ptr<sm::CausalLM> smollm2() {
  static std::shared_ptr<sm::CausalLM> model = [] {
    sm::ModelSpec spec;
    spec.name = "smollm2-135m";
    spec.path = source_dir() + "/models/smollm2-135m-instruct.gguf";
    spec.threads = 2;
    return sm::load(spec).model;
  }();
  return model;
}

at::Tensor random_tokens(int64_t B, int64_t T, uint64_t seed) {  // [B, T]
  specdec::Rng rng(seed);
  at::Tensor t = at::empty({B, T}, at::kLong);
  for (int64_t i = 0; i < B * T; ++i) t.data_ptr<int64_t>()[i] = static_cast<int64_t>(rng.next() % 40000);
  return t;
}

void run_batched(benchmark::State& state, bool ragged) {
  auto model = smollm2();
  const int64_t B = state.range(0), rows = state.range(1) + 1;
  sm::KVCache cache = model->make_cache(B, kPrefill + rows);
  model->forward(random_tokens(B, kPrefill, 1), std::vector<int64_t>(B, 0), cache);
  const at::Tensor step = random_tokens(B, rows, 2);
  sm::ForwardOptions opt;
  int64_t n_rows = B * rows;
  if (ragged) {
    n_rows = 0;
    for (int64_t b = 0; b < B; ++b) n_rows += opt.n_fed.emplace_back(1 + b % rows);
  }
  const std::vector<int64_t> start(B, kPrefill);
  for (auto _ : state) {
    const sm::ForwardResult r = model->forward(step, start, cache, opt);  // [B, rows, V]
    benchmark::DoNotOptimize(r.logits.data_ptr<float>());
    for (int64_t b = 0; b < B; ++b) cache.truncate(b, kPrefill);
  }
  state.counters["rows"] = static_cast<double>(n_rows);
}

void BM_batched_step(benchmark::State& state) { run_batched(state, false); }
void BM_ragged_step(benchmark::State& state) { run_batched(state, true); }

void BM_separate_steps(benchmark::State& state) {
  auto model = smollm2();
  const int64_t B = state.range(0), rows = state.range(1) + 1;
  std::vector<sm::KVCache> caches;
  std::vector<at::Tensor> steps;
  for (int64_t b = 0; b < B; ++b) {
    caches.push_back(model->make_cache(1, kPrefill + rows));
    model->forward(random_tokens(1, kPrefill, 10 + b), {0}, caches.back());
    steps.push_back(random_tokens(1, rows, 20 + b));
  }
  for (auto _ : state) {
    for (int64_t b = 0; b < B; ++b) {
      const at::Tensor logits = model->forward(steps[b], {kPrefill}, caches[b]);  // [1, rows, V]
      benchmark::DoNotOptimize(logits.data_ptr<float>());
      caches[b].truncate(0, kPrefill);
    }
  }
  state.counters["rows"] = static_cast<double>(B * rows);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "gamma"});
  for (int64_t batch : {1, 4, 8, 32}) b->Args({batch, 4});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_batched_step)->Apply(sizes);
BENCHMARK(BM_ragged_step)->Apply(sizes);
BENCHMARK(BM_separate_steps)->Apply(sizes);

BENCHMARK_MAIN();
