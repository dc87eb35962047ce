// Dequantisation throughput (specdec::io::dequantize) per quant type, and the time to
// dequantise every tensor of SmolLM2-135M (the model-load cost of the GGUF path).
// Bytes/s counts the quantised input read; items/s counts fp32 elements produced.
//   build/bench/bench_io_dequant --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "io/dequant.h"
#include "io/gguf.h"

using specdec::io::GgmlType;

namespace {

// 4 Mi elements: 16 MiB of fp32 output, larger than the caches, as at model load.
constexpr int64_t k_n = 4 << 20;

// Random blocks with a sane fp16 scale (0.01) in every scale/min slot so values are finite.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t n) {
  const int64_t n_blocks = n / specdec::io::ggml_block_size(t);
  const int64_t bytes = specdec::io::ggml_type_size(t);
  std::vector<uint8_t> buf(static_cast<size_t>(n_blocks * bytes));
  std::mt19937 rng(42);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint16_t d = specdec::io::fp32_to_fp16(0.01f);
  for (int64_t k = 0; k < n_blocks; ++k) {
    uint8_t* blk = buf.data() + k * bytes;
    if (t == GgmlType::Q6_K) {
      std::memcpy(blk + 208, &d, 2);
    } else {
      std::memcpy(blk, &d, 2);
      if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K || t == GgmlType::Q5_K)
        std::memcpy(blk + 2, &d, 2);
    }
  }
  return buf;
}

void bm_dequant(benchmark::State& state, GgmlType t) {
  const auto src = random_blocks(t, k_n);
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
  const std::string path = std::string(SPECDEC_SOURCE_DIR) + "/models/smollm2-135m-instruct.gguf";
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
