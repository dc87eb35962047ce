// Engine step costs against the memory-bandwidth floor (issue "Engine", results/engine.md).
//   BM_Bandwidth: read a 1 GiB buffer with 2 threads (vectorised sum) -> GB/s.
//   BM_Step/bf16:<0|1>/lib:<0|1>/T:<T>/ctx:<ctx>: one forward of T tokens (1 = decode, 5/8 =
//     verification) of SmolLM2-135M-Instruct (models/smollm2-135m-instruct.gguf, dequantised
//     to fp32; linear weights fp32 or bf16) after a prefill of ctx tokens, with Linear's
//     default dispatch (lib:0, packed weights and our panel kernel) or library kernels only (lib:1,
//     LinearPolicy::kLibrary). The cache is rolled back after each step, so every iteration
//     sees the same context.
//   BM_Gguf/model:<m>/native:<0|1|2>/T:<T>: the same step (ctx 128) on a catalog GGUF file
//     (m: 0 SmolLM2-135M Q4_1, 1 Qwen2.5-Coder-0.5B Q4, 2 Qwen2.5-Coder-1.5B Q4_K_M) loaded as
//     float32 (0), dtype native (1: the file's blocks, model/panels.h) or native_q8 (2: int8
//     activations); a missing file is skipped.
//     Issue 13's ratios: native / fp32 decode, verify(5) / decode(1), step / floor_ms.
// Run: build/bench/bench_model_decode --benchmark_repetitions=7 \
//        --benchmark_report_aggregates_only=true
// Counters: floor_ms = weight bytes / the bandwidth measured by BM_Bandwidth in the same run
// (run BM_Bandwidth first: it is registered first); compare the step time with floor_ms.
#include <benchmark/benchmark.h>
#if defined(__x86_64__) && !defined(SPECDEC_PORTABLE)
#include <immintrin.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/parallel.h"
#include "model/causal_lm.h"
#include "model/linear.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace sm = specdec::model;

namespace {

double g_bandwidth_gbs = 0;  // measured by BM_Bandwidth, used for the floor counters

// Sum of n floats with four independent AVX2 accumulators (the loop is load-bound, not
// add-latency-bound). n must be a multiple of 32.
#if defined(__x86_64__) && !defined(SPECDEC_PORTABLE)
__attribute__((target("avx2"))) float sum_floats(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#else
// Elsewhere eight independent accumulators, which the compiler vectorises for the target.
float sum_floats(const float* p, int64_t n) {
  float a[8] = {};
  for (int64_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
#endif

void BM_Bandwidth(benchmark::State& st) {
  const int64_t n = (int64_t(1) << 30) / sizeof(float);  // 1 GiB
  std::vector<float> buf(n, 1.0f);                       // touched: pages are resident
  const int n_threads = specdec::parallel::num_threads();
  std::vector<float> partial(static_cast<size_t>(n_threads));
  for (auto _ : st) {
    specdec::parallel::parallel_for(n_threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        partial[static_cast<size_t>(t)] = sum_floats(buf.data() + t * (n / n_threads), n / n_threads);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  st.counters["GB/s"] = benchmark::Counter(double(n * sizeof(float)) / 1e9,
                                           benchmark::Counter::kIsIterationInvariantRate);
}

struct Loaded {
  std::shared_ptr<sm::CausalLM> model;
  sm::KVCache cache;
  int64_t ctx = 0;
};

// SmolLM2 per dtype, Linear layout (LinearPolicy at load time) and context, prefilled once
// with a fixed pseudo-random prompt.
Loaded& loaded(int dtype, bool library, int64_t ctx) {
  static std::map<std::tuple<int, bool, int64_t>, Loaded> cache;
  static std::map<std::pair<int, bool>, std::shared_ptr<sm::CausalLM>> models;
  auto key = std::make_tuple(dtype, library, ctx);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (!models.count({dtype, library})) {
    sm::ModelSpec spec;
    spec.name = "smollm2-135m";
    spec.path = source_dir() + "/models/smollm2-135m-instruct.gguf";
    spec.dtype = dtype == 0 ? "float32" : "bfloat16";
    spec.threads = specdec::parallel::num_threads();  // keep the count main() chose
    sm::set_linear_policy(library ? sm::LinearPolicy::kLibrary : sm::LinearPolicy::kSkinny);
    models[{dtype, library}] = sm::load(spec).model;
    sm::set_linear_policy(sm::LinearPolicy::kSkinny);
  }
  Loaded l;
  l.model = models[{dtype, library}];
  l.ctx = ctx;
  l.cache = l.model->make_cache(1, ctx + 16);
  std::vector<int64_t> prompt(ctx);
  for (int64_t i = 0; i < ctx; ++i) prompt[i] = (i * 7919 + 13) % l.model->config().n_vocab;
  l.model->forward(at::tensor(prompt, at::kLong).view({1, ctx}), {0}, l.cache);
  return cache.emplace(key, std::move(l)).first->second;
}

void BM_Step(benchmark::State& st) {
  const int dtype = static_cast<int>(st.range(0));
  const bool library = st.range(1) != 0;
  const int64_t T = st.range(2), ctx = st.range(3);
  Loaded& l = loaded(dtype, library, ctx);
  std::vector<int64_t> ids(T);
  for (int64_t i = 0; i < T; ++i) ids[i] = 100 + 37 * i;
  at::Tensor tokens = at::tensor(ids, at::kLong).view({1, T});
  for (auto _ : st) {
    at::Tensor logits = l.model->forward(tokens, {ctx}, l.cache);
    benchmark::DoNotOptimize(logits.data_ptr<float>());
    l.cache.truncate(0, ctx);  // O(1) rollback: the next iteration sees the same context
  }
  const double bytes = double(l.model->weight_bytes());
  st.counters["weight_MB"] = bytes / 1e6;
  if (g_bandwidth_gbs > 0) st.counters["floor_ms"] = bytes / (g_bandwidth_gbs * 1e9) * 1e3;
  st.counters["threads"] = specdec::parallel::num_threads();
  st.SetLabel(std::string(dtype == 0 ? "fp32" : "bf16") + (library ? " library" : " skinny"));
}

// Only the projections of a SmolLM2-135M step: the 30 x 4 linear layers and the LM head with
// random weights of the model's shapes (538 MB in fp32, read from DRAM like the real step),
// called in model order on T rows. BM_Step minus this is everything else (attention, norms,
// RoPE, embedding, framework overhead).
void BM_LinearsOnly(benchmark::State& st) {
  const int dtype = static_cast<int>(st.range(0));
  const bool library = st.range(1) != 0;
  const int64_t T = st.range(2);
  static std::map<std::pair<int, bool>, std::vector<sm::Linear>> layers;
  if (!layers.count({dtype, library})) {
    const int64_t d = 576, kv = 192, ff = 1536;
    // As the model stores them: q/k/v stacked, o, gate/up stacked, down.
    const std::vector<std::pair<int64_t, int64_t>> shapes = {
        {d + 2 * kv, d}, {d, d}, {2 * ff, d}, {d, ff}};
    at::manual_seed(0);
    sm::set_linear_policy(library ? sm::LinearPolicy::kLibrary : sm::LinearPolicy::kSkinny);
    auto& v = layers[{dtype, library}];
    for (int l = 0; l < 30; ++l)
      for (auto [o, i] : shapes)
        v.emplace_back(at::randn({o, i}) * 0.05, at::Tensor(), dtype ? at::kBFloat16 : at::kFloat);
    v.emplace_back(at::randn({49152, d}) * 0.05, at::Tensor(), dtype ? at::kBFloat16 : at::kFloat);
    sm::set_linear_policy(sm::LinearPolicy::kSkinny);
  }
  const auto& v = layers[{dtype, library}];
  at::Tensor x576 = at::randn({T, 576}), x1536 = at::randn({T, 1536});
  int64_t bytes = 0;
  for (const auto& lin : v) bytes += lin.weight_bytes();
  for (auto _ : st) {
    for (const auto& lin : v) {
      at::Tensor y = lin(lin.in_features() == 576 ? x576 : x1536);
      benchmark::DoNotOptimize(y.data_ptr<float>());
    }
  }
  st.counters["weight_MB"] = double(bytes) / 1e6;
  if (g_bandwidth_gbs > 0) st.counters["floor_ms"] = double(bytes) / (g_bandwidth_gbs * 1e9) * 1e3;
  st.SetLabel(std::string(dtype == 0 ? "fp32" : "bf16") + (library ? " library" : " skinny"));
}

// A catalog GGUF model as float32 or native, prefilled with ctx pseudo-random tokens.
Loaded& loaded_gguf(int model, int native, int64_t ctx) {
  static const char* kFiles[] = {"smollm2-135m-instruct.gguf", "qwen2.5-coder-0.5b-instruct.gguf",
                                 "qwen2.5-coder-1.5b-instruct.gguf"};
  static std::map<std::tuple<int, int, int64_t>, Loaded> cache;
  auto key = std::make_tuple(model, native, ctx);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  sm::ModelSpec spec;
  spec.name = kFiles[model];
  spec.path = source_dir() + "/models/" + kFiles[model];
  spec.dtype = native == 2 ? "native_q8" : native == 1 ? "native" : "float32";
  spec.threads = specdec::parallel::num_threads();
  Loaded l;
  if (FILE* f = std::fopen(spec.path.c_str(), "rb")) {
    std::fclose(f);
    l.model = sm::load(spec).model;
    l.ctx = ctx;
    l.cache = l.model->make_cache(1, ctx + 16);
    std::vector<int64_t> prompt(ctx);
    for (int64_t i = 0; i < ctx; ++i) prompt[i] = (i * 7919 + 13) % l.model->config().n_vocab;
    l.model->forward(at::tensor(prompt, at::kLong).view({1, ctx}), {0}, l.cache);
  }
  return cache.emplace(key, std::move(l)).first->second;
}

void BM_Gguf(benchmark::State& st) {
  const int model = static_cast<int>(st.range(0));
  const int native = static_cast<int>(st.range(1));
  const int64_t T = st.range(2), ctx = 128;
  Loaded& l = loaded_gguf(model, native, ctx);
  if (!l.model) {
    st.SkipWithError("model file missing: run scripts/fetch_models.sh");
    return;
  }
  std::vector<int64_t> ids(T);
  for (int64_t i = 0; i < T; ++i) ids[i] = 100 + 37 * i;
  at::Tensor tokens = at::tensor(ids, at::kLong).view({1, T});
  for (auto _ : st) {
    at::Tensor logits = l.model->forward(tokens, {ctx}, l.cache);
    benchmark::DoNotOptimize(logits.data_ptr<float>());
    l.cache.truncate(0, ctx);
  }
  const double bytes = double(l.model->weight_bytes());
  st.counters["weight_MB"] = bytes / 1e6;
  if (g_bandwidth_gbs > 0) st.counters["floor_ms"] = bytes / (g_bandwidth_gbs * 1e9) * 1e3;
  st.SetLabel(native == 2 ? "native_q8" : native == 1 ? "native" : "fp32");
}

// Records the bandwidth of the BM_Bandwidth runs for the floor counters of later runs.
class BandwidthCapture : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.benchmark_name().rfind("BM_Bandwidth", 0) != 0) continue;
      auto it = r.counters.find("GB/s");
      if (it == r.counters.end()) continue;
      // With --benchmark_report_aggregates_only only aggregates arrive: use their median.
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const double gbs = it->second.value;  // already a rate: reporters get finished counters
      g_bandwidth_gbs = std::max(g_bandwidth_gbs, gbs);  // best repetition: the machine's rate
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

BENCHMARK(BM_Bandwidth)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_LinearsOnly)
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 5, 8}})
    ->ArgNames({"bf16", "lib", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_Gguf)
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}, {1, 5}})
    ->ArgNames({"model", "native", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_Step)
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 5, 8}, {128, 512}})
    ->ArgNames({"bf16", "lib", "T", "ctx"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
  // The machine's 2 cores, as the engine runs; SPECDEC_BENCH_THREADS overrides it (a
  // diagnostic for a loaded machine, where a 2-thread team waits on a descheduled member).
  const char* env = std::getenv("SPECDEC_BENCH_THREADS");
  sm::set_threads(env ? std::atoi(env) : 2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  BandwidthCapture reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
