// The speculative loop against its own prediction: speculative decoding with synthetic
// acceptance (each draft accepted with probability alpha; BENCHMARKING ONLY, the tokens are not
// the target's) on random weights of a real shape, the draft the target's first layer (a layer
// subset: the same engine, cheap drafts). In the same process it measures the step costs the
// prediction needs:
//   t_verify = one target forward of gamma + 1 fed tokens and the read of its arg-max,
//   t_draft  = one draft forward of 1 token and its read,
// and compares the measured decode tokens/s with Leviathan et al.'s prediction
//   (1 - alpha^(gamma+1)) / (1 - alpha) tokens per round / (gamma t_draft + t_verify).
// A shortfall is the loop's own overhead (host work, reads, launches between steps).
//
// batch_greedy/<shape>/<dtype>/batch:B: B requests decoded together (generate_batch: one
// ragged target forward per step for all of them), tokens/s over the batch's wall time, with
// the same figure at batch 1 from the same process beside it (speedup_over_batch1).
//
//   build/bench/bench_strategies_loop --device=cuda --shapes=smollm2,qwen2.5-1.5b --dtype=bfloat16
//   build/bench/bench_strategies_loop --device=cpu --shapes=tiny      # anywhere, a smoke run
//   (--batches=8,32: the batch sizes of batch_greedy; --batches= for none)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "experiments/micro/random_shapes.h"
#include "model/layer_subset.h"
#include "strategies/registry.h"

namespace {

using namespace specdec;

// Median wall time (ms) of `reps` calls of f.
template <class F>
double median_ms(F&& f, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {  // 2 warm-ups (captures)
    const auto a = std::chrono::steady_clock::now();
    f();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    if (i >= 2) t.push_back(ms);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// One forward of `fed` tokens at `start` and the read of its last row's arg-max, then back.
double step_ms(model::CausalLM& m, model::KVCache& cache, int64_t start, int64_t fed) {
  const at::Tensor tokens = at::randint(m.config().n_vocab, {1, fed}, at::kLong);
  return median_ms([&] {
    const at::Tensor logits = m.forward(tokens, {start}, cache);
    (void)logits.select(1, fed - 1).argmax(-1).item<int64_t>();
    cache.truncate(0, start);
  }, 20);
}

struct Loop {
  std::shared_ptr<model::CausalLM> target, draft;
  int64_t gamma = 4, prompt = 16, n_new = 128;
};

void bench_loop(benchmark::State& state, const Loop* loop, double alpha) {
  model::CausalLM& target = *loop->target;
  const int64_t g = loop->gamma;
  // The step costs, at the context the generation runs at (prompt + ~n_new / 2).
  const int64_t ctx = loop->prompt + loop->n_new / 2;
  model::KVCache tc = target.make_cache(1, loop->prompt + loop->n_new + 16);
  target.forward(at::randint(target.config().n_vocab, {1, ctx}, at::kLong), {0}, tc);
  const double t_verify = step_ms(target, tc, ctx, g + 1);
  model::KVCache dc = loop->draft->make_cache(1, loop->prompt + loop->n_new + 16);
  loop->draft->forward(at::randint(target.config().n_vocab, {1, ctx}, at::kLong), {0}, dc);
  const double t_draft = step_ms(*loop->draft, dc, ctx, 1);
  const double per_round = alpha < 1 ? (1 - std::pow(alpha, double(g + 1))) / (1 - alpha) : double(g + 1);
  const double predicted = 1000.0 * per_round / (double(g) * t_draft + t_verify);

  strategies::Request req;
  req.target = loop->target;
  req.draft = loop->draft;
  req.stop.max_new_tokens = loop->n_new;
  const at::Tensor p = at::randint(target.config().n_vocab, {loop->prompt}, at::kLong);
  for (int64_t i = 0; i < loop->prompt; ++i) req.prompt.push_back(p[i].item<int64_t>());
  const auto strategy = strategies::create(
      "speculative", strategies::Params({{"temperature", "0"}, {"drafter", "model"}, {"gamma", std::to_string(g)},
                                         {"synthetic_acceptance", std::to_string(alpha)}}));
  strategy->generate(req, {});  // warm-up: the captures of every bucket it meets
  double ms_decode = 0, tokens = 0, rounds = 0, accepted = 0, drafted = 0;
  for (auto _ : state) {
    req.seed = static_cast<uint64_t>(state.iterations());
    const strategies::Stats s = strategy->generate(req, {}).stats;
    ms_decode += s.ms_total - s.phase_ms.prefill;
    tokens += double(s.n_generated);
    rounds += double(s.n_rounds);
    accepted += double(s.n_accepted);
    drafted += double(s.n_drafted);
  }
  const double measured = 1000.0 * tokens / ms_decode;
  state.counters["synthetic_alpha"] = alpha;
  state.counters["accepted_per_drafted"] = accepted / drafted;
  state.counters["tokens_per_round"] = tokens / rounds;
  state.counters["ms_draft_step"] = t_draft;
  state.counters["ms_verify_step"] = t_verify;
  state.counters["tokens_per_s"] = measured;
  state.counters["predicted_tokens_per_s"] = predicted;
  state.counters["measured_over_predicted"] = measured / predicted;
}

// B random 16-token prompts, 64 new tokens each, greedy, all in one batch.
void bench_batch(benchmark::State& state, const Loop* loop, int64_t B) {
  std::vector<strategies::Request> reqs(static_cast<size_t>(B));
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].target = loop->target;
    reqs[i].stop.max_new_tokens = 64;
    const at::Tensor p = at::randint(loop->target->config().n_vocab, {loop->prompt}, at::kLong);
    for (int64_t t = 0; t < loop->prompt; ++t) reqs[i].prompt.push_back(p[t].item<int64_t>());
  }
  const auto greedy = strategies::create("greedy", strategies::Params());
  const auto tokens_per_s = [&](const std::vector<strategies::Request>& rs) {
    const auto a = std::chrono::steady_clock::now();
    double n = 0;
    for (const auto& r : greedy->generate_batch(rs, {static_cast<int64_t>(rs.size()), 0}, {})) n += double(r.stats.n_generated);
    return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  tokens_per_s(reqs);  // warm-up: the captures
  const std::vector<strategies::Request> one(reqs.begin(), reqs.begin() + 1);
  tokens_per_s(one);
  double batched = 0, single = 0;
  for (auto _ : state) {
    batched += tokens_per_s(reqs);
    single += tokens_per_s(one);
  }
  const double n = double(state.iterations());
  state.counters["batch"] = double(B);
  state.counters["tokens_per_s"] = batched / n;
  state.counters["batch1_tokens_per_s"] = single / n;
  state.counters["speedup_over_batch1"] = batched / single;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu", shape_list = "tiny", dtype_name = "bfloat16", alphas = "0.6,0.8,0.9", gamma_s = "4",
              batches = "8,32";
  if (!bench::parse_flags(argc, argv, {{"device", &device}, {"shapes", &shape_list}, {"dtype", &dtype_name},
                                       {"alphas", &alphas}, {"gamma", &gamma_s}, {"batches", &batches}}))
    return 1;
  const int64_t gamma = std::stoll(gamma_s);
  const at::Device dev(device);
  const at::ScalarType dtype = dtype_name == "float32" ? at::kFloat : at::kBFloat16;
  std::vector<std::unique_ptr<Loop>> keep;
  for (const std::string& name : bench::split(shape_list)) {
    const auto it = bench::shapes().find(name);
    if (it == bench::shapes().end()) {
      std::fprintf(stderr, "bench_strategies_loop: unknown shape '%s' (%s)\n", name.c_str(), bench::shape_names().c_str());
      return 2;
    }
    auto loop = std::make_unique<Loop>();
    loop->target = bench::random_model(it->second, dtype, dev, /*graphs=*/true);
    loop->draft = model::make_layer_subset(loop->target, {0});
    loop->gamma = gamma;
    for (const std::string& a : bench::split(alphas))
      benchmark::RegisterBenchmark(("spec_chain_synthetic/" + name + "/" + dtype_name + "/gamma:" + std::to_string(gamma) +
                                    "/alpha:" + a).c_str(),
                                   bench_loop, loop.get(), std::stod(a))
          ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(3);
    for (const std::string& b : bench::split(batches))
      benchmark::RegisterBenchmark(("batch_greedy/" + name + "/" + dtype_name + "/batch:" + b).c_str(), bench_batch,
                                   loop.get(), std::stoll(b))
          ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(2);
    keep.push_back(std::move(loop));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
