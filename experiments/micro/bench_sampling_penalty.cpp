// The repetition penalty's two forms on the CPU: the host's id lists (penalise: the draft read
// to the host) against the entry lists that take the draft where it is (penalise_on_device via
// sampling::DeviceDraft: every unread draft's form now, the GPU's and its CPU twin's). Penalty
// only (greedy), a committed text of 512 tokens, V in {49152 (SmolLM2), 151936 (Qwen2.5)}:
//   - shape 0: the verify rows of a chain of 4 (5 rows);
//   - shape 1: the verify rows of a binary tree of 64 nodes (65 rows);
//   - shape 2: one draft-loop row after 4 drafted tokens (rows = {3}).
//   build/bench/bench_sampling_penalty --benchmark_min_time=0.3 --benchmark_repetitions=3 \
//       --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <vector>

#include "sampling/processors.h"

namespace ss = specdec::sampling;

namespace {

struct Case {
  at::Tensor logits;  // [rows, V]
  specdec::Tokens context, draft;
  std::vector<int32_t> parents;  // empty: a chain
  ss::DeviceDraft held;
};

// rows: the rows processed; nodes: draft tokens (a chain when rows == nodes + 1 and tree is
// false); loop_row: one row after the last drafted token, as a draft loop's.
Case make_case(int64_t V, int64_t nodes, bool tree, bool loop_row) {
  at::manual_seed(3);
  Case c;
  c.logits = at::randn({loop_row ? 1 : nodes + 1, V}) * 4;
  for (int64_t j = 0; j < 512; ++j) c.context.push_back(static_cast<specdec::TokenId>((j * 7919) % V));
  for (int64_t j = 0; j < nodes; ++j) {
    c.draft.push_back(static_cast<specdec::TokenId>((j * 104729 + 11) % V));
    if (tree) c.parents.push_back(static_cast<int32_t>((j + 1) / 2 - 1));
  }
  c.held.tokens = at::tensor(std::vector<int64_t>(c.draft.begin(), c.draft.end()));
  if (tree) c.held.parents = at::tensor(std::vector<int64_t>(c.parents.begin(), c.parents.end()));
  if (loop_row) c.held.rows = at::full({1}, nodes - 1, at::kLong);
  return c;
}

ss::ProcessorConfig penalty_only() {
  ss::ProcessorConfig cfg;
  cfg.temperature = 0;
  cfg.repetition_penalty = 1.3;
  return cfg;
}

// range(0): V; range(1): 0 chain of 4, 1 tree of 64, 2 a draft-loop row after 4 tokens.
Case case_of(const benchmark::State& st) {
  const int64_t shape = st.range(1);
  return make_case(st.range(0), shape == 1 ? 64 : 4, shape == 1, shape == 2);
}

void BM_PenaltyHostIds(benchmark::State& st) {
  Case c = case_of(st);
  const ss::ProcessorConfig cfg = penalty_only();
  if (st.range(1) == 2) {  // the host's form of a loop row: the drafted tokens joined the text
    c.context.insert(c.context.end(), c.draft.begin(), c.draft.end());
    c.draft.clear();
  }
  for (auto _ : st) benchmark::DoNotOptimize(ss::process_logits(c.logits, cfg, c.context, c.draft, c.parents));
}

void BM_PenaltyDeviceDraft(benchmark::State& st) {
  const Case c = case_of(st);
  const ss::ProcessorConfig cfg = penalty_only();
  for (auto _ : st) benchmark::DoNotOptimize(ss::process_logits(c.logits, cfg, c.context, c.held));
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t V : {49152, 151936})
    for (int64_t shape : {0, 1, 2}) b->Args({V, shape});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_PenaltyHostIds)->Apply(shapes);
BENCHMARK(BM_PenaltyDeviceDraft)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
