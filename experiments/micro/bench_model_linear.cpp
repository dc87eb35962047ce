// Linear kernels on SmolLM2-135M shapes, to choose Linear's dispatch table (linear.cpp).
// Run: build/bench/bench_model_linear --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// Arguments: /shape/rows/path with shape 0: 576->1536 (MLP up), 1: 1536->576 (MLP down),
// 2: 576->49152 (LM head); path as LinearPath (1 mv, 2 dnnl, 3 gemm, 4 bf16 (at::linear),
// 5 skinny fp32 weights, 105 skinny bf16 weights).
// BM_Panels/type:<t>/rows:<n>/q8:<0|1>: the panel kernel on random GGUF blocks small enough to
// stay in cache (t 0: Q4_K 1536 -> 2048, 1: Q6_K 8960 -> 256, 2: Q4_1 1536 -> 2048), so the
// time is the kernel's arithmetic, not memory: the cost of each extra verification row, and of a
// prefill's 128 rows; q8 1: int8 activations (dtype native_q8), 0: fp32 activations (dtype
// native). The label names the kernel this process picked (SPECDEC_KERNELS=portable forces the
// portable one; SPECDEC_KERNELS=no-amx leaves a prefill's int8 rows to AVX512-VNNI).
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "io/dequant.h"
#include "model/causal_lm.h"
#include "model/linear.h"
#include "model/panels.h"
#include "tests/support/random_gguf.h"

namespace sm = specdec::model;

namespace {

struct Shape { int64_t in, out; };
const Shape kShapes[] = {{576, 1536}, {1536, 576}, {576, 49152}};

// One Linear per (shape, dtype, layout), built once: the LM head alone is 113 MB in fp32.
// The skinny path runs on packed panels, the library paths on the [out, in] layout (a forced
// path on the other layout would convert the weights on every call).
const sm::Linear& layer(int shape, bool bf16, bool packed) {
  static std::map<std::tuple<int, bool, bool>, sm::Linear> cache;
  auto key = std::make_tuple(shape, bf16, packed);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const Shape s = kShapes[shape];
    at::manual_seed(shape);
    at::Tensor w = at::randn({s.out, s.in}) * 0.05;
    sm::set_linear_policy(packed ? sm::LinearPolicy::kSkinny : sm::LinearPolicy::kLibrary);
    it = cache.emplace(key, sm::Linear(w, at::Tensor(), bf16 ? at::kBFloat16 : at::kFloat)).first;
    sm::set_linear_policy(sm::LinearPolicy::kSkinny);
  }
  return it->second;
}

void BM_Linear(benchmark::State& st) {
  const int shape = static_cast<int>(st.range(0));
  const int64_t n = st.range(1);
  const auto path = static_cast<sm::LinearPath>(st.range(2) % 100);
  const bool bf16 = path == sm::LinearPath::kBf16 || st.range(2) >= 100;
  const sm::Linear& lin = layer(shape, bf16, path == sm::LinearPath::kSkinny);
  at::Tensor x = at::randn({n, kShapes[shape].in});
  for (auto _ : st) {
    at::Tensor y = lin.forward_path(x, path);
    benchmark::DoNotOptimize(y.data_ptr<float>());
  }
  // Weight bytes streamed per call / time: how close a call gets to memory bandwidth.
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(lin.weight_bytes()),
                                           benchmark::Counter::kIsIterationInvariantRate,
                                           benchmark::Counter::kIs1000);
  st.counters["threads"] = specdec::parallel::num_threads();
  st.SetLabel(std::string(sm::linear_path_name(path)) + (bf16 ? "-bf16w" : "-fp32w"));
}

void args(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 1, 2})
    for (int64_t n : {1, 2, 5, 8, 16, 128}) {
      if (n == 1) b->Args({shape, n, static_cast<int64_t>(sm::LinearPath::kMv)});
      for (auto p : {sm::LinearPath::kDnnl, sm::LinearPath::kGemm, sm::LinearPath::kBf16})
        b->Args({shape, n, static_cast<int64_t>(p)});
      {
        b->Args({shape, n, static_cast<int64_t>(sm::LinearPath::kSkinny)});
        b->Args({shape, n, 100 + static_cast<int64_t>(sm::LinearPath::kSkinny)});
      }
    }
}
BENCHMARK(BM_Linear)->Apply(args)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Panels(benchmark::State& st) {
  namespace io = specdec::io;
  const int type = static_cast<int>(st.range(0));
  const bool q8 = st.range(2) == 1;
  const io::GgmlType t = type == 1 ? io::GgmlType::Q6_K : type == 2 ? io::GgmlType::Q4_1 : io::GgmlType::Q4_K;
  const int64_t in = type == 1 ? 8960 : 1536, out = type == 1 ? 256 : 2048, n = st.range(1);
  static std::map<std::pair<int, bool>, std::pair<std::vector<uint8_t>, sm::PanelWeight>> cache;
  auto it = cache.find({type, q8});
  if (it == cache.end()) {
    std::vector<uint8_t> bytes = specdec::testing::random_tensor(t, out, in, 1);
    sm::QuantBlocks qb;
    qb.name = "bench";
    qb.type = t;
    qb.data = bytes.data();
    qb.out = out;
    qb.in = in;
    sm::PanelWeight w = sm::PanelWeight::from_blocks({qb}, q8);
    it = cache.emplace(std::make_pair(type, q8), std::make_pair(std::move(bytes), std::move(w))).first;
  }
  const sm::PanelWeight& w = it->second.second;
  const at::Tensor x = at::randn({n, in});
  for (auto _ : st) {
    at::Tensor y = w.forward(x, at::Tensor());
    benchmark::DoNotOptimize(y.data_ptr<float>());
  }
  st.counters["weight_MB"] = static_cast<double>(w.bytes()) / 1e6;
  st.SetLabel(std::string(io::ggml_type_name(t)) + (q8 ? "/q8 " : " ") +
              (q8 ? sm::panels_int8_kernel() : sm::panels_kernel()));
}
BENCHMARK(BM_Panels)
    ->ArgsProduct({{0, 1, 2}, {1, 5, 128}, {0, 1}})
    ->ArgNames({"type", "rows", "q8"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // The machine's 2 cores, as the engine runs; SPECDEC_BENCH_THREADS overrides it (a
  // diagnostic for a loaded machine, where a 2-thread team waits on a descheduled member).
  const char* env = std::getenv("SPECDEC_BENCH_THREADS");
  specdec::model::set_threads(env ? std::atoi(env) : 2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
