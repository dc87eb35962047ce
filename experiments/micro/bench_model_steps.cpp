// The ATen engine's step costs on a device, with and without static (graph-captured) steps:
// decode (1 fed token, then the arg-max read back: what a greedy step pays) and the verify
// curve (k fed tokens of a chain after 512 tokens of context, k = 1..128; a speculative
// round's target step). Random weights of a real model's shape, generated on the device, so
// that the GPU machine needs no model file. Weights' bytes over the device's bandwidth give
// the floor; `graphs=off` is the eager path in the same run.
//
//   build/bench/bench_model_steps --device=cuda --shapes=smollm2,qwen2.5-1.5b --dtype=bfloat16
//       [--benchmark_out=steps.json --benchmark_out_format=json]
//   build/bench/bench_model_steps --device=cpu --shapes=tiny       # the CPU twin, a smoke run
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "experiments/micro/random_shapes.h"

namespace {

using namespace specdec;
using bench::random_model;
using bench::shape_names;
using bench::shapes;
using bench::split;

// One step as the decode loop takes it: the forward, the arg-max on the device, one read.
int64_t step(model::CausalLM& m, model::KVCache& cache, const at::Tensor& tokens, int64_t start) {
  const at::Tensor logits = m.forward(tokens, {start}, cache);  // [1, k, V]
  return logits.select(1, logits.size(1) - 1).argmax(-1).item<int64_t>();
}

// Time per iteration = ms per token; GB_per_s = the weights' bytes read per second.
void bench_decode(benchmark::State& state, model::CausalLM* m, int64_t prompt, int64_t n_new) {
  model::KVCache cache = m->make_cache(1, prompt + n_new + 8);
  const at::Tensor p = at::randint(m->config().n_vocab, {1, prompt}, at::kLong);
  int64_t tok = step(*m, cache, p, 0);
  int64_t pos = prompt, n = 0;
  for (auto _ : state) {
    // One token per iteration at positions prompt .. prompt + n_new - 1, then from the start.
    if (pos == prompt + n_new) pos = prompt;
    tok = step(*m, cache, at::full({1, 1}, tok, at::kLong), pos++);
    ++n;
  }
  state.counters["GB_per_s"] = benchmark::Counter(double(m->weight_bytes()) * double(n) * 1e-9, benchmark::Counter::kIsRate);
}

void bench_verify(benchmark::State& state, model::CausalLM* m, int64_t context, int64_t k) {
  model::KVCache cache = m->make_cache(1, context + 160);
  const at::Tensor p = at::randint(m->config().n_vocab, {1, context}, at::kLong);
  step(*m, cache, p, 0);
  const at::Tensor fed = at::randint(m->config().n_vocab, {1, k}, at::kLong);
  for (auto _ : state) {
    benchmark::DoNotOptimize(step(*m, cache, fed, context));
    cache.truncate(0, context);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu", shape_list = "tiny", dtype_name = "bfloat16", graphs_list = "on,off", context_s = "512",
              new_s = "128";
  if (!bench::parse_flags(argc, argv, {{"device", &device}, {"shapes", &shape_list}, {"dtype", &dtype_name},
                                       {"graphs", &graphs_list}, {"context", &context_s}, {"new_tokens", &new_s}}))
    return 1;
  const int64_t context = std::stoll(context_s), n_new = std::stoll(new_s);
  const at::Device dev(device);
  const at::ScalarType dtype = dtype_name == "float32" ? at::kFloat : at::kBFloat16;
  std::vector<std::shared_ptr<model::CausalLM>> keep;  // alive until the benchmarks have run
  for (const std::string& name : split(shape_list)) {
    const auto it = shapes().find(name);
    if (it == shapes().end()) {
      std::fprintf(stderr, "bench_model_steps: unknown shape '%s' (%s)\n", name.c_str(), shape_names().c_str());
      return 2;
    }
    for (const std::string& g : split(graphs_list)) {
      keep.push_back(random_model(it->second, dtype, dev, g == "on"));
      model::CausalLM* m = keep.back().get();
      const std::string tag = name + "/" + dtype_name + "/graphs:" + g;
      benchmark::RegisterBenchmark(("decode/" + tag).c_str(), bench_decode, m, int64_t{16}, n_new)
          ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
      for (int64_t k : {1, 2, 4, 8, 16, 32, 64, 128})
        benchmark::RegisterBenchmark(("verify/" + tag + "/ctx:" + std::to_string(context) + "/k:" + std::to_string(k)).c_str(),
                                     bench_verify, m, context, k)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
