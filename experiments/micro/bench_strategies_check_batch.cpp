// One batch of the harness's distribution-check samples (cell_checks.cpp: CellRunner::sampling_checks), as the
// quickstart's spec-self cell draws them: 8 speculative generations of 4 tokens at T = 0.7 from
// one prompt whose prefill is stored (model::PrefixReuse), drafted by the model itself, in one
// Strategy::generate_batch call; and the same 8 one after another (checks.batch_size 1).
//   build/bench/bench_strategies_check_batch --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// BM_check_batch/8 should cost well under 8 x BM_check_batch/1 per batch: the batch reads the
// weights once per step for all 8. It once cost 2.7x more than 8 separate samples, because a
// batch of 8 newcomers feeding the same prompt reached PrefixReuse as a dense batch, which it
// passed to the model whole: every batch recomputed the 77-token prefill 8 times (issue 30,
// item 7; tests/unit/test_model_prefix_reuse.cpp DenseBatchOfNewcomersIsServedFromThePrefix).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "model/prefix_reuse.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace sm = specdec::model;
namespace ss = specdec::strategies;

namespace {

constexpr int64_t kPrompt = 77;  // the quickstart's first prompt, in SmolLM2 tokens

struct Rig {
  std::shared_ptr<sm::CausalLM> model;
  std::vector<int64_t> prompt;
};

const Rig& rig() {
  static const Rig r = [] {
    sm::ModelSpec spec;
    spec.name = "smollm2-135m";
    spec.path = source_dir() + "/models/smollm2-135m-instruct.gguf";
    spec.threads = 2;
    spec.dtype = "float32";
    Rig out;
    const sm::LoadedModel m = sm::load(spec);
    const specdec::Tokens ids = m.tokenizer->encode("Rename every variable of this function to something meaningful and explain "
                                     "why: def f(a, b):\n    c = a + b\n    d = c * 2\n    return d - a\n",
                                                    true);
    out.prompt.assign(ids.begin(), ids.end());
    out.prompt.resize(kPrompt, out.prompt.back());
    out.model = std::make_shared<sm::PrefixReuse>(m.model, out.prompt);
    return out;
  }();
  return r;
}

void BM_check_batch(benchmark::State& state) {
  const Rig& r = rig();
  const int64_t batch = state.range(0);
  auto strategy = ss::create("speculative", ss::Params({{"temperature", "0.7"}, {"drafter", "model"}, {"gamma", "4"}}));
  std::vector<ss::Request> reqs(8);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = specdec::Tokens(r.prompt.begin(), r.prompt.end());
    reqs[i].target = reqs[i].draft = r.model;
    reqs[i].stop.max_new_tokens = 4;
    reqs[i].seed = 1000 + i;
  }
  for (auto _ : state) {
    const std::vector<ss::Result> out = strategy->generate_batch(reqs, {batch, 0}, {});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["samples/s"] = benchmark::Counter(8.0 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_check_batch)->ArgName("batch_size")->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
