// A trained drafter's round for a batch of B sequences, two ways, in one process:
//   lockstep  the registry's batch form (make_batch_drafter): eagle.cpp's draft_chains (per
//             depth one head forward and one output-head product for all slots) or medusa.cpp's
//             MedusaRows::run (the heads and the output-head product once a round for all slots);
//   per_slot  B batch-1 drafters (make_drafter), one after another: B head forwards and B
//             output-head products, each reading the weights again.
// A round: propose gamma = 2 tokens per slot, show the drafter the target's features of the
// fed rows (random: the head's cost does not depend on their values) and commit with every draft
// rejected (each sequence grows by one token, the head caches by one position).
//   build/bench/bench_strategies_heads_batch --benchmark_repetitions=5 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// Needs the SmolLM2 heads: build/specdec train-drafter --config configs/drafters/smollm2_eagle_chat.yaml
// and configs/drafters/smollm2_medusa.yaml (a missing head skips its benchmarks).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "model/loader.h"
#include "strategies/drafters.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"

namespace sm = specdec::model;
namespace ss = specdec::strategies;
using specdec::Tokens;

namespace {

// The drafters and their heads.
struct Head {
  const char* drafter;
  const char* param;
  const char* dir;
  const char* config;
};
const Head kEagle{"eagle", "eagle_head", SPECDEC_SOURCE_DIR "/heads/smollm2-135m-eagle-chat", "smollm2_eagle_chat.yaml"};
const Head kMedusa{"medusa", "medusa_head", SPECDEC_SOURCE_DIR "/heads/smollm2-135m-medusa", "smollm2_medusa.yaml"};
constexpr int64_t kGamma = 2, kRounds = 64, kCapacity = 1024;

struct Rig {
  sm::LoadedModel m;
  Tokens prompt;
  at::Tensor prompt_hidden;  // [n - 1, d]: the prefill's features
};

const Rig& rig() {
  static const Rig r = [] {
    sm::ModelSpec spec;
    spec.name = "smollm2-135m";
    spec.path = SPECDEC_SOURCE_DIR "/models/smollm2-135m-instruct.gguf";
    spec.threads = 2;
    Rig out;
    out.m = sm::load(spec);
    out.prompt = out.m.tokenizer->encode("Write a Python function that returns the n-th Fibonacci number.", true);
    const int64_t n = static_cast<int64_t>(out.prompt.size()) - 1;
    sm::KVCache cache = out.m.model->make_cache(1, n);
    sm::ForwardOptions opt;
    opt.final_hidden = true;
    const at::Tensor ids = at::tensor(std::vector<int64_t>(out.prompt.begin(), out.prompt.end() - 1), at::kLong);
    out.prompt_hidden = out.m.model->forward(ids.view({1, n}), {0}, cache, opt).hidden.select(0, 0);
    return out;
  }();
  return r;
}

// B sequences drafting kRounds rounds; the timer covers propose() only.
void run(benchmark::State& state, const Head& head, bool lockstep) {
  if (!std::filesystem::exists(std::string(head.dir) + "/head.json")) {
    state.SkipWithError((std::string("no trained head: build/specdec train-drafter --config configs/drafters/") +
                         head.config).c_str());
    return;
  }
  const Rig& r = rig();
  const int64_t B = state.range(0);
  const ss::Params params = ss::resolve(
      "speculative", ss::Params({{"drafter", head.drafter}, {head.param, head.dir}, {"temperature", "0"}, {"gamma", "2"}}));
  const specdec::sampling::ProcessorConfig proc = ss::processor_config(params);
  ss::Request req;
  req.prompt = r.prompt;
  req.target = r.m.model;
  req.tokenizer = r.m.tokenizer;
  const at::Tensor fed_hidden = at::randn({kGamma + 1, r.prompt_hidden.size(1)});
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<specdec::Rng> rngs(B, specdec::Rng(1));
    std::unique_ptr<ss::BatchDrafter> batch;
    std::vector<std::unique_ptr<ss::Drafter>> own;
    std::vector<ss::Drafter*> d;
    if (lockstep) batch = ss::make_batch_drafter(head.drafter, req, params, proc, B, kCapacity);
    for (int64_t b = 0; b < B; ++b) {
      const ss::DrafterContext ctx{req, params, proc, rngs[b], kCapacity, kGamma};
      if (lockstep) {
        batch->join(b, ctx);
        d.push_back(&batch->at(b));
      } else {
        own.push_back(ss::make_drafter(head.drafter, ctx));
        d.push_back(own.back().get());
      }
      d.back()->observe_features(Tokens(r.prompt.begin(), r.prompt.end() - 1), {}, r.prompt_hidden);
    }
    std::vector<Tokens> seqs(B, r.prompt);
    std::vector<const Tokens*> seq_ptrs;
    for (const Tokens& s : seqs) seq_ptrs.push_back(&s);
    const std::vector<int64_t> depth(B, kGamma);
    state.ResumeTiming();
    for (int64_t round = 0; round < kRounds; ++round) {
      std::vector<ss::DraftProposal> drafts;
      if (lockstep) {
        ss::PhaseTimes ms;
        drafts = batch->propose(seq_ptrs, depth, ms);
      } else {
        for (int64_t b = 0; b < B; ++b) drafts.push_back(d[b]->propose(seqs[b], kGamma));
      }
      state.PauseTiming();
      for (int64_t b = 0; b < B; ++b) {
        Tokens fed = {seqs[b].back()};
        fed.insert(fed.end(), drafts[b].tokens.begin(), drafts[b].tokens.end());
        d[b]->observe_features(fed, {}, fed_hidden.narrow(0, 0, static_cast<int64_t>(fed.size())));
        seqs[b].push_back(drafts[b].tokens.empty() ? 0 : drafts[b].tokens[0]);
        d[b]->commit(static_cast<int64_t>(seqs[b].size()) - 1, {});
      }
      state.ResumeTiming();
    }
  }
  state.counters["rounds/s"] = benchmark::Counter(static_cast<double>(kRounds) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}

void BM_eagle_draft_lockstep(benchmark::State& state) { run(state, kEagle, true); }
void BM_eagle_draft_per_slot(benchmark::State& state) { run(state, kEagle, false); }
void BM_medusa_draft_lockstep(benchmark::State& state) { run(state, kMedusa, true); }
void BM_medusa_draft_per_slot(benchmark::State& state) { run(state, kMedusa, false); }
BENCHMARK(BM_eagle_draft_lockstep)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_eagle_draft_per_slot)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_medusa_draft_lockstep)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_medusa_draft_per_slot)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
