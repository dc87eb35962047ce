// Dequantisation throughput (specdec::io::dequantize) per quant type, and the time to
// dequantise every tensor of SmolLM2-135M (the model-load cost of the GGUF path).
// Bytes/s counts the quantised input read; items/s counts fp32 elements produced.
//   build/bench/bench_io_dequant --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <vector>

#include "io/dequant.h"
#include "io/gguf.h"
#include "tests/support/random_gguf.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using specdec::io::GgmlType;

namespace {

// 4 Mi elements: 16 MiB of fp32 output, larger than the caches, as at model load.
constexpr int64_t k_n = 4 << 20;

void bm_dequant(benchmark::State& state, GgmlType t) {
  const auto src = specdec::testing::random_tensor(t, 1, k_n, 42);  // random finite scales
  std::vector<float> dst(static_cast<size_t>(k_n));
  for (auto _ : state) {
    specdec::io::dequantize(t, src.data(), dst.data(), k_n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(src.size()));
  state.SetItemsProcessed(state.iterations() * k_n);
  state.counters["out_GB/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * k_n * 4e-9,
                                                  benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(bm_dequant, Q4_1, GgmlType::Q4_1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q4_K, GgmlType::Q4_K)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q6_K, GgmlType::Q6_K)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q5_K, GgmlType::Q5_K)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q8_0, GgmlType::Q8_0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q4_0, GgmlType::Q4_0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q5_0, GgmlType::Q5_0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, Q5_1, GgmlType::Q5_1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, F16, GgmlType::F16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_dequant, BF16, GgmlType::BF16)->Unit(benchmark::kMillisecond);

// Open (mmap + parse metadata) and dequantise all 272 tensors into one fp32 buffer each.
void bm_load_smollm2(benchmark::State& state) {
  const std::string path = source_dir() + "/models/smollm2-135m-instruct.gguf";
  std::vector<std::vector<float>> out;
  int64_t n_elements = 0;
  for (auto _ : state) {
    auto f = specdec::io::GgufFile::open(path);
    out.resize(f->tensors().size());
    n_elements = 0;
    for (size_t k = 0; k < f->tensors().size(); ++k) {
      const auto& t = f->tensors()[k];
      out[k].resize(static_cast<size_t>(t.n_elements()));
      f->read_f32(t, out[k].data());
      n_elements += t.n_elements();
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n_elements);
}
BENCHMARK(bm_load_smollm2)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
