// Speculative decoding with the n-gram (prompt lookup) drafter vs greedy on SmolLM2-135M,
// measured interleaved in one process: every iteration runs greedy, then speculative, on
// each prompt (prompts that invite copying: code edits, quotes). Counters:
//   speedup      = greedy decode ms / speculative decode ms (same tokens, checked)
//   overhead_pct = share of wall time outside model forwards (framework overhead)
// Run: build/bench/bench_strategies_speedup --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <filesystem>
#include <iostream>

#include "model/causal_lm.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::strategies;

namespace {

const char* kPrompts[] = {
    "Rename the variable `count` to `total` in this code and return the full code:\n"
    "def add(values):\n    count = 0\n    for v in values:\n        count += v\n    return count\n",
    "Add a docstring to this function and return the whole function:\n"
    "int clamp(int x, int lo, int hi) {\n  if (x < lo) return lo;\n  if (x > hi) return hi;\n  return x;\n}\n",
    "Repeat this sentence exactly: \"The quick brown fox jumps over the lazy dog near the river bank.\"",
    "Summarise with a quote: The committee said \"the budget will grow by ten percent next year\" and "
    "added that \"hiring will resume in spring\".",
};

const model::LoadedModel* smollm2() {
  static const model::LoadedModel* m = []() -> const model::LoadedModel* {
    const std::string path = source_dir() + "/models/smollm2-135m-instruct.gguf";
    if (!std::filesystem::exists(path)) return nullptr;
    model::set_threads(2);
    model::ModelSpec spec;
    spec.path = path;
    spec.threads = 2;
    return new model::LoadedModel(model::load(spec));
  }();
  return m;
}

// Wall time outside model forwards: ngram drafting, processors, verification, stop handling.
double overhead_ms(const Stats& s, bool model_drafter) {
  return s.ms_total - s.phase_ms.prefill - s.phase_ms.verify - (model_drafter ? s.phase_ms.draft : 0.0);
}

void BM_NgramVsGreedyInterleaved(benchmark::State& state) {
  const model::LoadedModel* m = smollm2();
  if (!m) {
    state.SkipWithError("models/smollm2-135m-instruct.gguf missing: run scripts/fetch_models.sh smollm2-135m");
    return;
  }
  const int64_t max_new = state.range(0);
  auto greedy = create("greedy", {});
  auto spec = create("speculative", Params({{"temperature", "0"}, {"drafter", "ngram"},
                                            {"gamma", std::to_string(state.range(1))}}));
  double ms_greedy = 0, ms_spec = 0, over_greedy = 0, over_spec = 0, n_tok = 0, n_drafted = 0, n_accepted = 0;
  double n_rounds = 0, n_mismatch = 0;
  for (auto _ : state) {
    for (const char* text : kPrompts) {
      Request req;
      req.target = m->model;
      req.tokenizer = m->tokenizer;
      req.prompt = m->tokenizer->encode(m->tokenizer->apply_chat_template({{"user", text}}, true), true);
      req.stop.eos_ids = m->tokenizer->eos_ids();
      req.stop.max_new_tokens = max_new;
      const Result g = greedy->generate(req, {});
      const Result s = spec->generate(req, {});
      n_mismatch += g.tokens != s.tokens;
      ms_greedy += g.stats.ms_total - g.stats.phase_ms.prefill;
      ms_spec += s.stats.ms_total - s.stats.phase_ms.prefill;
      over_greedy += overhead_ms(g.stats, false) / g.stats.ms_total;
      over_spec += overhead_ms(s.stats, false) / s.stats.ms_total;
      n_tok += double(s.stats.n_generated);
      n_drafted += double(s.stats.n_drafted);
      n_accepted += double(s.stats.n_accepted);
      n_rounds += double(s.stats.n_rounds);
    }
  }
  const double n_runs = double(state.iterations()) * double(std::size(kPrompts));
  state.counters["speedup"] = ms_greedy / ms_spec;
  state.counters["greedy_ms_per_tok"] = ms_greedy / n_tok;
  state.counters["spec_ms_per_tok"] = ms_spec / n_tok;
  state.counters["overhead_pct_greedy"] = 100.0 * over_greedy / n_runs;
  state.counters["overhead_pct_spec"] = 100.0 * over_spec / n_runs;
  state.counters["alpha"] = n_drafted > 0 ? n_accepted / n_drafted : 0.0;
  state.counters["tau"] = n_rounds > 0 ? n_tok / n_rounds : 0.0;
  state.counters["token_mismatches"] = n_mismatch;
}
BENCHMARK(BM_NgramVsGreedyInterleaved)->Args({64, 4})->Args({64, 8})->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
