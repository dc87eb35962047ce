// The device path of the decoding loop on SmolLM2-135M: the model computed with LibTorch ops
// (engine aten) on a device, its KV cache there, verification and tree compaction through that
// device's kernels::Backend. On "cpu" this runs in CI and is the GPU path's CPU twin; on
// "cuda" it runs only where a GPU and a CUDA LibTorch exist (scripts/test.sh --gpu,
// scripts/gpu_check.sh), and skips elsewhere.
//  - the tests of tests/support/strategies_device_cases.h (greedy speculative == greedy for
//    chains and trees, aten == packed, batches == batch 1, seeded sampling, host reads per step
//    and round, fresh EAGLE/Medusa heads, structured output), which run in seconds on a tiny random Llama in
//    tests/unit/test_strategies_device_tiny.cpp (the fast tier's twin);
//  - a draft model on the other device (target on cuda, draft on the cpu, and the reverse):
//    its q reaches the target's kernel on the target's device (needs CUDA on both params);
//  - the repetition penalty on the device at SmolLM2's vocabulary width.
// Tiers: the fast tier keeps one real-model test, GreedySpeculativeEqualsGreedyForChainsAndTrees
// (cpu_graphs; cuda where there is one); every other test runs in the heavy tier. A test added
// to the shared header lands in the fast tier here until the filter below names it. The heavy
// tests are two entries, in two shards (~7-8 min as one on a 2-core Intel Xeon at 2.0 GHz): those
// on cpu_graphs are test_strategies_device_smollm2_graphs, the rest (cpu, and cuda where there is
// one) test_strategies_device_smollm2_heavy.
// ctest-heavy-part: graphs */OnDevice.GreedyEqualsThePackedCpuEngine/cpu_graphs:*/OnDevice.BatchesGiveEachRequestItsBatch1Tokens/cpu_graphs:*/OnDevice.SeededSpeculativeSamplingIsReproducible/cpu_graphs:*/OnDevice.HostReadsPerStepAndRound/cpu_graphs:*/OnDevice.TrainedHeadsDraftWhereTheTargetIsWithOneReadARound/cpu_graphs:*/OnDevice.ADraftModelOnTheOtherDeviceHandsItsQToTheTargetsDevice/cpu_graphs:*/OnDevice.RepetitionPenaltyOnTheDeviceEqualsTheHostsBitForBit/cpu_graphs:*/OnDevice.ConstrainedDecodingKeepsConstrainedGreedyAndReadsWhatTheMatcherNeeds/cpu_graphs
// ctest-heavy: */OnDevice.GreedyEqualsThePackedCpuEngine/*:*/OnDevice.BatchesGiveEachRequestItsBatch1Tokens/*:*/OnDevice.SeededSpeculativeSamplingIsReproducible/*:*/OnDevice.HostReadsPerStepAndRound/*:*/OnDevice.TrainedHeadsDraftWhereTheTargetIsWithOneReadARound/*:*/OnDevice.ADraftModelOnTheOtherDeviceHandsItsQToTheTargetsDevice/*:*/OnDevice.RepetitionPenaltyOnTheDeviceEqualsTheHostsBitForBit/*:*/OnDevice.ConstrainedDecodingKeepsConstrainedGreedyAndReadsWhatTheMatcherNeeds/*
#include <string>
#include <vector>

#include "model/layer_subset.h"
#include "sampling/processors.h"
#include "tests/support/strategies_device_cases.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace test_strategies_device_smollm2 {  // this file's own names (its tests compile in a batch with others)

const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";

const char* const kPrompts[] = {
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Repeat this sentence exactly: \"The quick brown fox jumps over the lazy dog near the river bank.\"\n",
    "Write a haiku about the sea.\n",  // a batch's third
};

// device: "cpu", "cuda" (static steps captured as CUDA graphs: graphs auto), or "cpu_graphs"
// (the same static steps on the CPU, uncaptured: the graph path's twin in CI).
model::LoadedModel load_smollm2(const std::string& device, const std::string& engine) {
  model::ModelSpec spec;
  spec.name = "smollm2-135m";
  spec.path = kModel;
  spec.threads = 2;
  spec.device = device == "cpu_graphs" ? "cpu" : device;
  spec.engine = engine;
  if (device == "cpu_graphs") spec.graphs = "on";
  return model::load(spec);
}

}  // namespace test_strategies_device_smollm2

// Declared by strategies_device_cases.h, outside this file's namespace.
const specdec::testing_support::DeviceTarget& dut() {
  using namespace test_strategies_device_smollm2;
  static const specdec::testing_support::DeviceTarget t = [] {
    specdec::testing_support::DeviceTarget t;
    t.name = "smollm2-135m";
    t.file = kModel;
    t.load = load_smollm2;
    // A draft that disagrees with the target often enough: SmolLM2 without 5 of its 30 layers.
    t.skipping_draft = [](const std::shared_ptr<model::CausalLM>& target) {
      std::vector<int64_t> keep;
      for (int64_t l = 0; l < 30; ++l)
        if (l < 10 || l > 22 || (l - 10) % 3 != 0) keep.push_back(l);
      return model::make_layer_subset(target, keep);
    };
    t.prompt = [](const model::LoadedModel& m, size_t i) { return m.tokenizer->encode(kPrompts[i], true); };
    return t;
  }();
  return t;
}

namespace test_strategies_device_smollm2 {

TEST_P(OnDevice, ADraftModelOnTheOtherDeviceHandsItsQToTheTargetsDevice) {
  // q lives where the draft model runs; verification reads it on the target's device. Before
  // the fix a CUDA kernel was handed a host pointer (and the CPU kernel a device one).
  if (!at::hasCUDA()) {
    ASSERT_EQ(std::getenv("SPECDEC_REQUIRE_CUDA"), nullptr) << "no CUDA device or no CUDA LibTorch";
    GTEST_SKIP() << "mixed devices need CUDA";
  }
  const std::string other = is_cuda(GetParam()) ? "cpu" : "cuda";
  const model::LoadedModel m = load(GetParam(), "aten"), d = load(other, "aten");
  ASSERT_NE(m.model->device().type(), d.model->device().type());
  Request req = request(m, 0, 24);
  req.draft = d.model;
  req.seed = 3;
  const Result base = create("greedy", params({}))->generate(req, {});
  EXPECT_EQ(create("speculative", params({{"drafter", "model"}}))->generate(req, {}).tokens, base.tokens);
  for (const char* verify : {"tokenwise", "block"}) {
    const Params p({{"temperature", "0.8"}, {"drafter", "model"}, {"verify", verify}});
    const Result r1 = create("speculative", p)->generate(req, {});
    const Result r2 = create("speculative", p)->generate(req, {});
    EXPECT_EQ(r1.tokens, r2.tokens) << verify;
    EXPECT_GT(r1.stats.n_accepted, 0) << verify << ": the same weights draft, so most tokens are accepted";
  }
}

// The repetition penalty where the logits are: a tree's draft held there (sampling::DeviceDraft)
// or the host's uploaded scales the same entries as the host's id lists, bit for bit (a GPU
// must divide by the penalty, not multiply by its reciprocal), at SmolLM2's vocabulary width.
TEST_P(OnDevice, RepetitionPenaltyOnTheDeviceEqualsTheHostsBitForBit) {
  const at::Device device(GetParam() == "cpu_graphs" ? "cpu" : GetParam());
  at::manual_seed(9);
  const int64_t V = 49152, D = 12;
  sampling::ProcessorConfig cfg;
  cfg.temperature = 0;  // the penalty alone (a softmax need not match across devices)
  cfg.repetition_penalty = 1.3;
  const at::Tensor logits = at::randn({D + 1, V}) * 4;
  Tokens ctx, draft;
  std::vector<int32_t> parents;
  for (int64_t j = 0; j < 200; ++j) ctx.push_back(static_cast<TokenId>((j * 7919) % 3000));
  for (int64_t j = 0; j < D; ++j) {
    draft.push_back(static_cast<TokenId>((j * 104729) % 5000));
    parents.push_back(static_cast<int32_t>(j / 2) - 1);  // a binary tree
  }
  const at::Tensor want = sampling::process_logits(logits, cfg, ctx, draft, parents);
  sampling::DeviceDraft held;
  held.tokens = at::tensor(std::vector<int64_t>(draft.begin(), draft.end())).to(device);
  held.parents = at::tensor(std::vector<int64_t>(parents.begin(), parents.end())).to(device);
  const at::Tensor on = logits.to(device);
  EXPECT_TRUE(sampling::process_logits(on, cfg, ctx, held).cpu().equal(want));
  EXPECT_TRUE(sampling::process_logits(on, cfg, ctx, draft, parents).cpu().equal(want));
  EXPECT_FALSE(want.equal(logits)) << "the penalty changed some scores";
}

INSTANTIATE_TEST_SUITE_P(Devices, OnDevice, ::testing::Values("cpu", "cpu_graphs", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace test_strategies_device_smollm2
