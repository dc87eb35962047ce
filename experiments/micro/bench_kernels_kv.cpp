// KV-cache kernels on a SmolLM2-135M-shaped cache (30 layers, 3 KV heads, head_dim 64):
//   build/bench/bench_kernels_kv --benchmark_min_time=0.2
// * rollback at context 256 and 4096: a speculative step rewinds 4 rejected positions of
//   every layer. It only moves lengths, so its cost must not depend on the context.
// * compaction (tree acceptance): keep 4 of the last 8 positions, all layers, K and V.
// * beam reorder of B = 4 beams (a full copy, so it does grow with the context).
#include <benchmark/benchmark.h>

#include <vector>

#include "core/rng.h"
#include "kernels/kernels.h"

namespace sk = specdec::kernels;

namespace {

constexpr int64_t kLayers = 30, kHeads = 3, kHeadDim = 64;

// K and V of every layer: [B, H, S, D] each, plus per-sequence lengths.
struct Cache {
  int64_t B, S;
  std::vector<std::vector<float>> kv;  // 2 * kLayers tensors of [B, H, S, D]
  std::vector<int64_t> lengths;        // [B]
  Cache(int64_t b, int64_t s) : B(b), S(s), kv(2 * kLayers, std::vector<float>(b * kHeads * s * kHeadDim)), lengths(b, s) {
    specdec::Rng rng(1);
    for (auto& t : kv)
      for (auto& x : t) x = rng.uniformf();
  }
};

void BM_rollback(benchmark::State& state) {
  const int64_t ctx = state.range(0), B = state.range(1);
  Cache cache(B, ctx);
  std::vector<int64_t> rewound(B, ctx - 4), full(B, ctx);
  for (auto _ : state) {
    sk::kv_rollback(cache.lengths.data(), rewound.data(), B);  // reject the last 4 positions
    benchmark::DoNotOptimize(cache.lengths.data());
    cache.lengths = full;  // the next forward re-extends (not part of the rollback)
  }
}
BENCHMARK(BM_rollback)->ArgNames({"ctx", "B"})->Args({256, 1})->Args({4096, 1})->Args({256, 8})->Args({4096, 8});

void BM_compact(benchmark::State& state) {
  const int64_t ctx = state.range(0), B = 1, max_keep = 4;
  Cache cache(B, ctx);
  // Accepted tree path: 4 of the last 8 positions move down to ctx - 8.
  std::vector<int64_t> src_pos = {ctx - 7, ctx - 5, ctx - 4, ctx - 1}, dst_start = {ctx - 8};
  std::vector<int32_t> n_keep = {4};
  for (auto _ : state) {
    for (auto& t : cache.kv) {
      sk::CompactArgs a;
      a.kv = t.data(), a.batch = B, a.heads = kHeads, a.max_seq = ctx, a.head_dim = kHeadDim;
      a.src_pos = src_pos.data(), a.n_keep = n_keep.data(), a.dst_start = dst_start.data(), a.max_keep = max_keep;
      sk::kv_compact_cpu(a);
    }
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_compact)->ArgNames({"ctx"})->Arg(256)->Arg(4096)->Unit(benchmark::kMicrosecond);

void BM_reorder(benchmark::State& state) {
  const int64_t ctx = state.range(0), B = 4;
  Cache cache(B, ctx);
  std::vector<float> dst(B * kHeads * ctx * kHeadDim);
  const std::vector<int64_t> idx = {1, 1, 0, 3};
  for (auto _ : state) {
    for (auto& t : cache.kv) sk::kv_reorder_cpu(dst.data(), t.data(), idx.data(), B, kHeads * ctx * kHeadDim);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kLayers * static_cast<int64_t>(dst.size() * sizeof(float)));
}
BENCHMARK(BM_reorder)->ArgNames({"ctx"})->Arg(256)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
