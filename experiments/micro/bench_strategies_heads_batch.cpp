// A trained drafter's round for a batch of B sequences, two ways, in one process:
//   lockstep  the registry's batch form (make_batch_drafter): eagle.cpp's draft_chains (per
//             depth one head forward and one output-head product for all slots), the tree
//             drafter's lockstep over EAGLE's head (tree.cpp's TreeDrafter::grow, the same per
//             depth) or medusa.cpp's MedusaRows::run (the heads and the output-head product once
//             a round for all slots);
//   per_slot  B batch-1 drafters (make_drafter), one after another: B head forwards and B
//             output-head products, each reading the weights again.
// A round: propose a draft per slot (chains: gamma = 2 tokens; the EAGLE tree: an EAGLE-2 dynamic
// tree of 8 nodes, tree_topk 3, 4 deep, as experiments/trained_drafters_*.yaml), show the
// drafter the target's feature of the root row (random: the head's cost does not depend on its
// values) and commit with every draft rejected (each sequence grows by one token, the head
// caches by one position).
//   build/bench/bench_strategies_heads_batch --benchmark_repetitions=5 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// Needs the SmolLM2 heads: build/specdec train-drafter --config configs/drafters/smollm2_eagle_chat.yaml
// and configs/drafters/smollm2_medusa.yaml (a missing head skips its benchmarks).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/loader.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace sm = specdec::model;
namespace ss = specdec::strategies;
using specdec::Tokens;

namespace {

// The drafters, their heads and shapes.
struct Head {
  const char* drafter;
  const char* param;
  std::string dir;
  const char* config;
  int64_t gamma;
  std::map<std::string, std::string> shape;  // further speculative parameters
};
const std::string kEagleDir = source_dir() + "/heads/smollm2-135m-eagle-chat";
const Head kEagle{"eagle", "eagle_head", kEagleDir, "smollm2_eagle_chat.yaml", 2, {}};
const Head kEagleTree{"eagle", "eagle_head", kEagleDir, "smollm2_eagle_chat.yaml", 4,
                      {{"eagle_shape", "tree"}, {"tree_budget", "8"}, {"tree_topk", "3"}}};
const Head kMedusa{"medusa", "medusa_head", source_dir() + "/heads/smollm2-135m-medusa", "smollm2_medusa.yaml", 2,
                  {}};
constexpr int64_t kRounds = 64, kCapacity = 1024;

struct Rig {
  sm::LoadedModel m;
  Tokens prompt;
  at::Tensor prompt_hidden;  // [n - 1, d]: the prefill's features
};

const Rig& rig() {
  static const Rig r = [] {
    sm::ModelSpec spec;
    spec.name = "smollm2-135m";
    spec.path = source_dir() + "/models/smollm2-135m-instruct.gguf";
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
  if (!std::filesystem::exists(head.dir + "/head.json")) {
    state.SkipWithError((std::string("no trained head: build/specdec train-drafter --config configs/drafters/") +
                         head.config).c_str());
    return;
  }
  const Rig& r = rig();
  const int64_t B = state.range(0);
  std::map<std::string, std::string> p = head.shape;
  p.insert({{"drafter", head.drafter}, {head.param, head.dir}, {"temperature", "0"}});
  p["gamma"] = std::to_string(head.gamma);
  const ss::Params params = ss::resolve("speculative", ss::Params(p));
  const specdec::sampling::ProcessorConfig proc = ss::processor_config(params);
  ss::Request req;
  req.prompt = r.prompt;
  req.target = r.m.model;
  req.tokenizer = r.m.tokenizer;
  const at::Tensor fed_hidden = at::randn({1, r.prompt_hidden.size(1)});
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<specdec::Rng> rngs(B, specdec::Rng(1));
    std::unique_ptr<ss::BatchDrafter> batch;
    std::vector<std::unique_ptr<ss::Drafter>> own;
    std::vector<ss::Drafter*> d;
    if (lockstep) batch = ss::make_batch_drafter(head.drafter, req, params, proc, B, kCapacity);
    for (int64_t b = 0; b < B; ++b) {
      const ss::DrafterContext ctx{req, params, proc, rngs[b], kCapacity, head.gamma};
      if (lockstep) {
        batch->join(b, ctx);
        d.push_back(&batch->at(b));
      } else {
        own.push_back(ss::make_drafter(head.drafter, ctx));
        d.push_back(own.back().get());
      }
      d.back()->prefill(Tokens(r.prompt.begin(), r.prompt.end() - 1), r.prompt_hidden);
    }
    std::vector<Tokens> seqs(B, r.prompt);
    std::vector<const Tokens*> seq_ptrs;
    for (const Tokens& s : seqs) seq_ptrs.push_back(&s);
    const std::vector<int64_t> depth(B, head.gamma);
    state.ResumeTiming();
    for (int64_t round = 0; round < kRounds; ++round) {
      std::vector<ss::DraftProposal> drafts;
      if (lockstep) {
        ss::PhaseTimes ms;
        drafts = batch->propose(seq_ptrs, depth, ms);
      } else {
        for (int64_t b = 0; b < B; ++b) drafts.push_back(d[b]->propose(seqs[b], head.gamma));
      }
      state.PauseTiming();
      for (int64_t b = 0; b < B; ++b) {
        const specdec::TokenId root = seqs[b].back();
        seqs[b].push_back(drafts[b].tokens.empty() ? 0 : drafts[b].tokens[0]);
        d[b]->observe(ss::Round{static_cast<int64_t>(seqs[b].size()) - 1, {}, ss::TargetRows{{root}, {}, {}, fed_hidden}});
      }
      state.ResumeTiming();
    }
  }
  state.counters["rounds/s"] = benchmark::Counter(static_cast<double>(kRounds) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}

void BM_eagle_draft_lockstep(benchmark::State& state) { run(state, kEagle, true); }
void BM_eagle_draft_per_slot(benchmark::State& state) { run(state, kEagle, false); }
void BM_eagle_tree_draft_lockstep(benchmark::State& state) { run(state, kEagleTree, true); }
void BM_eagle_tree_draft_per_slot(benchmark::State& state) { run(state, kEagleTree, false); }
void BM_medusa_draft_lockstep(benchmark::State& state) { run(state, kMedusa, true); }
void BM_medusa_draft_per_slot(benchmark::State& state) { run(state, kMedusa, false); }
BENCHMARK(BM_eagle_draft_lockstep)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_eagle_draft_per_slot)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_eagle_tree_draft_lockstep)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_eagle_tree_draft_per_slot)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_medusa_draft_lockstep)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_medusa_draft_per_slot)->ArgName("B")->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
