// The speculative loop against its own prediction: speculative decoding with synthetic
// acceptance (draft nodes accepted at random; BENCHMARKING ONLY, the tokens are not the
// target's) on random weights of a real shape, the draft the target's first layer (a layer
// subset: the same engine, cheap drafts). Acceptance follows Sequoia's positional model: at each
// node the i-th child tried is accepted with accept[i] (the last value for later children; a
// chain uses accept[0]). The default, 0.8,0.45, is fitted to the Qwen2.5 1.5B / 0.5B pair on
// Spec-Bench at T=0 (results/drafters_spec_bench/: chain4 tau 3.36 gives 0.8; the static tree
// 2,2,1,1's tau 3.83 then gives 0.45; the 64-node dynamic tree's 4.20 agrees with 4,2,2,1's 4.21).
//
// In the same process it measures the step costs the prediction needs, each the way the loop
// runs it: a draft forward of 1 token (a chain step, a tree's root), a tree's growth forwards
// (depth d's nodes fed with the d-1 depths before them cached: tree_cached), the target's
// verify forward of the round's 1 + nodes tokens, each with the read of an arg-max. The
// prediction (Leviathan et al. for chains, Sequoia for trees):
//   tokens per round = 1 + E, E = P_1 (1 + P_2 (1 + ... P_D)), P_d = 1 - prod_i<k_d (1 - accept[i])
//   ms per round     = draft forwards + verify forward
// and the measured decode tokens/s beside it. A shortfall is the loop's own overhead (host work,
// reads, launches between steps).
//
// batch_greedy/<shape>/<dtype>/batch:B: B requests decoded together (generate_batch: one
// ragged target forward per step for all of them), tokens/s over the batch's wall time, with
// the same figure at batch 1 from the same process beside it (speedup_over_batch1).
//
//   build/bench/bench_strategies_loop --device=cuda --shapes=smollm2,qwen2.5-1.5b --dtype=bfloat16
//   build/bench/bench_strategies_loop --device=cpu --shapes=tiny      # anywhere, a smoke run
//   (--gammas=4,6,8 chains; --trees="2,2,1,1;4,2,2,1" static trees; --accept=0.8,0.45;
//    --batches=8,32: the batch sizes of batch_greedy; an empty list for none)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "experiments/micro/random_shapes.h"
#include "model/layer_subset.h"
#include "strategies/registry.h"
#include "speculative/verifier.h"

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

// One forward of `fed` tokens at `start` (opt: a tree, tree_cached) and the read of its last
// row's arg-max, then the cache back to `start`.
double step_ms(model::CausalLM& m, model::KVCache& cache, int64_t start, int64_t fed,
               const model::ForwardOptions& opt = {}) {
  const at::Tensor tokens = at::randint(m.config().n_vocab, {1, fed}, at::kLong);
  return median_ms([&] {
    const at::Tensor logits = m.forward(tokens, {start}, cache, opt).logits;
    (void)logits.select(1, fed - 1).argmax(-1).item<int64_t>();
    cache.truncate(0, start);
  }, 20);
}

// The static tree of children-per-node `branching`, breadth first (a depth's nodes together, a
// node's children together, as the tree drafter lays it out): parent of each node, -1 the root.
std::vector<int32_t> tree_parents(const std::vector<int64_t>& branching) {
  std::vector<int32_t> parents;
  std::vector<int32_t> level = {-1};
  for (int64_t k : branching) {
    std::vector<int32_t> next;
    for (int32_t p : level)
      for (int64_t c = 0; c < k; ++c) {
        next.push_back(static_cast<int32_t>(parents.size()));
        parents.push_back(p);
      }
    level = std::move(next);
  }
  return parents;
}

// Expected tokens per round (the bonus token included) of the static tree `branching` under the
// positional model (a chain: branching all 1).
double tokens_per_round(const std::vector<int64_t>& branching, const std::vector<double>& accept) {
  double below = 0;  // expected accepted nodes under a node of the current depth
  for (auto k = branching.rbegin(); k != branching.rend(); ++k) {
    double none = 1;
    for (int64_t i = 0; i < *k; ++i) none *= 1 - accept[std::min<size_t>(size_t(i), accept.size() - 1)];
    below = (1 - none) * (1 + below);
  }
  return 1 + below;
}

struct Loop {
  std::shared_ptr<model::CausalLM> target, draft;
  int64_t prompt = 16, n_new = 128;
  std::vector<double> accept;
  std::string accept_text;
};

// What one round costs, measured step by step (ms).
struct RoundCost {
  double draft = 0, verify = 0;
};

RoundCost round_cost(const Loop& loop, const std::vector<int64_t>& branching, bool chain) {
  model::CausalLM& target = *loop.target;
  model::CausalLM& draft = *loop.draft;
  const int64_t V = target.config().n_vocab;
  // The step costs at the context the generation runs at (prompt + ~n_new / 2).
  const int64_t ctx = loop.prompt + loop.n_new / 2, cap = loop.prompt + loop.n_new + 300;
  model::KVCache tc = target.make_cache(1, cap), dc = draft.make_cache(1, cap);
  target.forward(at::randint(V, {1, ctx}, at::kLong), {0}, tc);
  draft.forward(at::randint(V, {1, ctx}, at::kLong), {0}, dc);
  RoundCost c;
  const double one = step_ms(draft, dc, ctx, 1);
  const std::vector<int32_t> parents = tree_parents(branching);
  const int64_t nodes = static_cast<int64_t>(parents.size());
  if (chain) {
    c.draft = double(nodes) * one;
    c.verify = step_ms(target, tc, ctx, nodes + 1);
    return c;
  }
  c.draft = one;  // the root: the last committed token
  int64_t cached = 0, width = 1;
  for (size_t d = 0; d + 1 < branching.size(); ++d) {  // depth d + 1's nodes are fed; the leaves never
    width *= branching[d];
    model::ForwardOptions before, grow;  // the depths before, in the cache; then this depth's nodes
    before.parents.assign(parents.begin(), parents.begin() + cached);
    grow.tree_cached = cached;
    grow.parents.assign(parents.begin(), parents.begin() + cached + width);
    if (cached > 0) draft.forward(at::randint(V, {1, cached}, at::kLong), {ctx}, dc, before);
    c.draft += step_ms(draft, dc, ctx + cached, width, grow);
    dc.truncate(0, ctx);
    cached += width;
  }
  model::ForwardOptions verify;  // the root (the last committed token) is row 0
  verify.parents = {-1};
  for (int32_t p : parents) verify.parents.push_back(p + 1);
  c.verify = step_ms(target, tc, ctx, nodes + 1, verify);
  return c;
}

struct LoopShape {
  std::string drafter;              // model (a chain) or tree
  std::vector<int64_t> branching;   // a chain: gamma ones
  std::string label;
};

void bench_loop(benchmark::State& state, const Loop* loop, LoopShape shape) {
  const bool chain = shape.drafter == "model";
  const RoundCost c = round_cost(*loop, shape.branching, chain);
  const double per_round = tokens_per_round(shape.branching, loop->accept);
  const double predicted = 1000.0 * per_round / (c.draft + c.verify);

  strategies::Request req;
  req.target = loop->target;
  req.draft = loop->draft;
  req.stop.max_new_tokens = loop->n_new;
  const at::Tensor p = at::randint(loop->target->config().n_vocab, {loop->prompt}, at::kLong);
  for (int64_t i = 0; i < loop->prompt; ++i) req.prompt.push_back(p[i].item<int64_t>());
  std::map<std::string, std::string> params = {
      {"temperature", "0"}, {"drafter", shape.drafter}, {"synthetic_acceptance", loop->accept_text}};
  if (chain) {
    params["gamma"] = std::to_string(shape.branching.size());
  } else {
    params["tree_branching"] = shape.label;
    params["tree_budget"] = "0";
    params["gamma"] = std::to_string(shape.branching.size());
  }
  const auto strategy = strategies::create("speculative", strategies::Params(params));
  strategy->generate(req, {});  // warm-up: the captures of every bucket it meets
  double ms_decode = 0, tokens = 0, rounds = 0;
  for (auto _ : state) {
    req.seed = static_cast<uint64_t>(state.iterations());
    const strategies::Stats s = strategy->generate(req, {}).stats;
    ms_decode += s.ms_total - s.phase_ms.prefill;
    tokens += double(s.n_generated);
    rounds += double(s.n_rounds);
  }
  const double measured = 1000.0 * tokens / ms_decode;
  state.counters["accept_rank1"] = loop->accept[0];
  state.counters["accept_rank2"] = loop->accept[std::min<size_t>(1, loop->accept.size() - 1)];
  state.counters["nodes"] = double(tree_parents(shape.branching).size());
  state.counters["tokens_per_round"] = tokens / rounds;
  state.counters["ms_per_round"] = ms_decode / rounds;  // against the steps' sum: the loop's own cost
  state.counters["predicted_ms_per_round"] = c.draft + c.verify;
  state.counters["predicted_tokens_per_round"] = per_round;
  state.counters["ms_draft_per_round"] = c.draft;
  state.counters["ms_verify_step"] = c.verify;
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
  std::string device = "cpu", shape_list = "tiny", dtype_name = "bfloat16", accept = "0.8,0.45", gammas = "4,6,8",
              trees = "2,2,1,1;4,2,2,1;2,2,1,1,1,1;4,2,2,1,1,1;4,2,1,1,1,1,1,1", batches = "8,32";
  if (!bench::parse_flags(argc, argv, {{"device", &device}, {"shapes", &shape_list}, {"dtype", &dtype_name},
                                       {"accept", &accept}, {"gammas", &gammas}, {"trees", &trees},
                                       {"batches", &batches}}))
    return 1;
  std::vector<LoopShape> loops;
  try {
    for (const std::string& g : bench::split(gammas))
      loops.push_back({"model", std::vector<int64_t>(size_t(std::stoll(g)), 1), "gamma:" + g});
    for (const std::string& t : bench::split(trees, ';')) {
      LoopShape s{"tree", {}, t};
      for (const std::string& k : bench::split(t)) s.branching.push_back(std::stoll(k));
      loops.push_back(s);
    }
  } catch (const std::exception&) {
    std::fprintf(stderr, "bench_strategies_loop: bad --gammas '%s' or --trees '%s'\n", gammas.c_str(), trees.c_str());
    return 2;
  }
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
    loop->accept = strategies::parse_synthetic(accept);
    loop->accept_text = accept;
    for (const LoopShape& s : loops)
      benchmark::RegisterBenchmark(("spec_" + std::string(s.drafter == "model" ? "chain" : "tree") + "_synthetic/" + name +
                                    "/" + dtype_name + "/" + (s.drafter == "model" ? s.label : "tree:" + s.label) +
                                    "/accept:" + accept).c_str(),
                                   bench_loop, loop.get(), s)
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
