// The ATen engine (llama_aten.h) on SmolLM2-135M, run on the CPU: the GPU path's CPU twin.
// Checked against the packed engine on the same file (prefill, decode steps, a 5-row
// verification, 32 greedy tokens, layer subsets and hidden outputs), and against itself
// (a token tree's rows against the same paths fed as chains; a ragged batch against its
// sequences alone). Both engines compute in fp32 but through different kernels, so logits
// agree to rounding, not bit for bit: tol() bounds the difference by the rounding model of
// tests/support/float_bounds.h (the measured values are printed; a wrong RoPE position, mask or
// cache slot moves logits by whole units). Heavy tier since 2026-12-02; its tiny twin is
// test_model_aten (docs/testing.md).
// ctest-heavy: *
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/host_reads.h"
#include "io/gguf.h"
#include "model/loader.h"
#include "tests/support/float_bounds.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::model;

namespace test_model_aten_smollm2 {  // this file's own names (its tests compile in a batch with others)

const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";
// "def fibonacci(n):" and a few more ids: any in-vocabulary prefix will do.
const std::vector<int64_t> kPrompt = {1, 563, 28601, 28, 90, 2730, 198, 262, 446, 284, 1024, 42};
const std::vector<int64_t> kPrompt2 = {1, 9690, 198, 2683, 359, 253, 5356};
// SmolLM2-135M: 30 layers; the longest reduction is the MLP's down projection (d_ff 1536).
constexpr int64_t kLayers = 30, kLongestSum = 1536;
// The rounding model's bound scales with the logits' magnitude: the largest |logit| of the
// reference rows compared so far (the packed engine's, or the first of two aten computations).
// The real SmolLM2 stays below 40 on these prompts (largest seen 34.3: a bound 31 layers deep,
// 30 and the output head, of 5.8e-3 at 40); the GPU pack's shrunk file (scripts/gpu_pack.sh: 2
// of its 30 layers compute) reaches ~76, and the bound with it.
float g_logit_scale = 0;
// Largest |logit difference| accepted between two fp32 computations of the same row.
float tol() {
  return static_cast<float>(specdec::testing::absolute_bound(kLayers + 1, kLongestSum, std::max(g_logit_scale, 1.0f)));
}

at::Tensor ids_tensor(const std::vector<int64_t>& ids) {  // [1, T]
  return at::tensor(at::IntArrayRef(ids), at::kLong).view({1, -1});
}

float max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (b.size(-1) > 1000) g_logit_scale = std::max(g_logit_scale, b.abs().max().item<float>());
  return (a - b).abs().max().item<float>();
}

int64_t argmax_last(const at::Tensor& logits) {  // [1, T, V] -> argmax of the last row
  return logits[0][logits.size(1) - 1].argmax().item<int64_t>();
}

// Each test runs twice: the eager path (graphs off) and the static steps (graphs on: on the CPU
// uncaptured, the steps a GPU captures as CUDA graphs).
class SmolLM2Aten : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;
    set_threads(2);
    packed_ = load_llama_gguf(*io::GgufFile::open(kModel));
    ModelSpec spec;  // through load(): the engine/device wiring, and the tokenizer with it
    spec.name = "smollm2";
    spec.path = kModel;
    spec.engine = "aten";
    spec.device = "cpu";
    spec.threads = 2;
    LoadedModel m = load(spec);
    aten_ = m.model;
    spec.graphs = "on";
    aten_graphs_ = load(spec).model;
    tokenizer_ok_ = m.tokenizer != nullptr;
  }
  static void TearDownTestSuite() {
    packed_.reset();
    aten_.reset();
    aten_graphs_.reset();
  }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
    ASSERT_TRUE(packed_ && aten_ && aten_graphs_);
  }
  static std::shared_ptr<CausalLM> aten_of(const std::string& graphs) { return graphs == "on" ? aten_graphs_ : aten_; }
  static KVCache prefilled(CausalLM& m, const std::vector<int64_t>& prompt, int64_t capacity) {
    KVCache cache = m.make_cache(1, capacity);
    m.forward(ids_tensor(prompt), {0}, cache);
    return cache;
  }
  static inline std::shared_ptr<CausalLM> packed_, aten_, aten_graphs_;
  static inline bool tokenizer_ok_ = false;
};

TEST_P(SmolLM2Aten, LoadsOnTheCpuWithItsTokenizer) {
  EXPECT_TRUE(tokenizer_ok_);
  EXPECT_EQ(aten_of(GetParam())->device(), at::Device(at::kCPU));
  EXPECT_EQ(aten_of(GetParam())->config().n_layers, packed_->config().n_layers);
  EXPECT_EQ(aten_of(GetParam())->weight_bytes(), packed_->weight_bytes());  // fp32 [out, in] either way
  KVCache c = aten_of(GetParam())->make_cache(1, 8);
  EXPECT_EQ(c.k(0).device(), aten_of(GetParam())->device());
  EXPECT_EQ(c.k(0).scalar_type(), at::kFloat);
}

// Prefill, four decode steps, a 5-row verification, then a rollback by two and another
// verification over the rolled-back slots: logits of both engines within tol().
TEST_P(SmolLM2Aten, PrefillDecodeAndVerifyMatchThePackedEngine) {
  const int64_t P = static_cast<int64_t>(kPrompt.size());
  KVCache cp = packed_->make_cache(1, 64), ca = aten_of(GetParam())->make_cache(1, 64);
  float worst = 0;
  auto both = [&](const std::vector<int64_t>& tokens, int64_t start) {
    const at::Tensor a = packed_->forward(ids_tensor(tokens), {start}, cp);
    const at::Tensor b = aten_of(GetParam())->forward(ids_tensor(tokens), {start}, ca);
    EXPECT_EQ(b.scalar_type(), at::kFloat);
    EXPECT_EQ(b.device(), aten_of(GetParam())->device());
    EXPECT_EQ(ca.length(0), start + static_cast<int64_t>(tokens.size()));
    EXPECT_EQ(cp.lengths(), ca.lengths());
    worst = std::max(worst, max_diff(a, b));
    EXPECT_EQ(argmax_last(a), argmax_last(b)) << "start " << start;
    return argmax_last(a);
  };
  int64_t next = both(kPrompt, 0);
  for (int64_t i = 0; i < 4; ++i) next = both({next}, P + i);
  both({next, 198, 262, 446, 284}, P + 4);  // verification: 5 rows
  both({90, 2730, 198, 42, 28}, P + 7);     // rollback to P + 7, overwriting slots
  EXPECT_LT(worst, tol());
  std::printf("prefill/decode/verify: max |aten - packed| = %.3g (threshold %.3g)\n", worst, tol());
}

// Greedy decoding with each engine on its own: the same 32 tokens.
TEST_P(SmolLM2Aten, Greedy32TokensEqualThePackedEngine) {
  auto greedy = [&](CausalLM& m) {
    KVCache cache = m.make_cache(1, 64);
    std::vector<int64_t> out;
    int64_t next = argmax_last(m.forward(ids_tensor(kPrompt), {0}, cache));
    for (int64_t i = 0; i < 32; ++i) {
      out.push_back(next);
      next = argmax_last(m.forward(ids_tensor({next}), {cache.length(0)}, cache));
    }
    return out;
  };
  EXPECT_EQ(greedy(*aten_of(GetParam())), greedy(*packed_));
}

// Fed-token counts between the static steps' buckets (10 -> 12, 13 -> 16): the padding rows
// must neither be seen by the real rows nor disturb the cache they leave behind. Logits of a
// chain, then of a tree, against the packed engine, then a decode step after both.
TEST_P(SmolLM2Aten, ChainsAndTreesBetweenBucketsMatchThePackedEngine) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), V = packed_->config().n_vocab;
  std::mt19937 gen(11);
  const auto random_ids = [&](int64_t n) {
    std::vector<int64_t> ids(n);
    for (auto& t : ids) t = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
    return ids;
  };
  CausalLM& aten = *aten_of(GetParam());
  KVCache ca = prefilled(aten, kPrompt, P + 40), cp = prefilled(*packed_, kPrompt, P + 40);
  const std::vector<int64_t> chain = random_ids(10);
  float worst = max_diff(aten.forward(ids_tensor(chain), {P}, ca), packed_->forward(ids_tensor(chain), {P}, cp));
  ForwardOptions opt;
  for (int32_t t = 0; t < 13; ++t) opt.parents.push_back(std::uniform_int_distribution<int32_t>(-1, t - 1)(gen));
  const std::vector<int64_t> tree = random_ids(13);
  worst = std::max(worst, max_diff(aten.forward(ids_tensor(tree), {P + 10}, ca, opt).logits,
                                   packed_->forward(ids_tensor(tree), {P + 10}, cp, opt).logits));
  // Keep the tree's first node only, then one more token: its row sees the prompt, the chain
  // and that node, not the padding slots the bucket wrote.
  ca.truncate(0, P + 11);
  cp.truncate(0, P + 11);
  worst = std::max(worst, max_diff(aten.forward(ids_tensor({42}), {P + 11}, ca), packed_->forward(ids_tensor({42}), {P + 11}, cp)));
  EXPECT_LT(worst, tol());
  std::printf("between buckets (%s): max |aten - packed| = %.3g (threshold %.3g)\n", GetParam().c_str(), worst, tol());
}

// A random token tree: each node's row equals its root-to-node path fed as a chain through
// the same engine (within tol(), and the same argmax); the tree's rows also match the packed
// engine's tree forward. Then the same tree grown over two forwards (tree_cached).
TEST_P(SmolLM2Aten, TreeRowsEqualTheirPathsFedAsChains) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), V = aten_of(GetParam())->config().n_vocab, n = 12;
  std::mt19937 gen(5);
  std::vector<int32_t> parents(n);
  for (int64_t t = 0; t < n; ++t) parents[t] = std::uniform_int_distribution<int32_t>(-1, int32_t(t) - 1)(gen);
  std::vector<int64_t> tokens(n);
  for (auto& t : tokens) t = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
  ForwardOptions opt;
  opt.parents = parents;
  KVCache ca = prefilled(*aten_of(GetParam()), kPrompt, P + n), cp = prefilled(*packed_, kPrompt, P + n);
  const at::Tensor tree = aten_of(GetParam())->forward(ids_tensor(tokens), {P}, ca, opt).logits[0];  // [n, V]
  EXPECT_EQ(ca.length(0), P + n);
  float worst_chain = 0, worst_packed = max_diff(tree, packed_->forward(ids_tensor(tokens), {P}, cp, opt).logits[0]);
  int64_t max_depth = 0;
  for (int64_t node = 0; node < n; ++node) {
    std::vector<int64_t> path;
    for (int64_t a = node; a >= 0; a = parents[a]) path.insert(path.begin(), tokens[a]);
    max_depth = std::max<int64_t>(max_depth, static_cast<int64_t>(path.size()));
    KVCache chain_cache = prefilled(*aten_of(GetParam()), kPrompt, P + n);
    const at::Tensor chain = aten_of(GetParam())->forward(ids_tensor(path), {P}, chain_cache)[0];
    const at::Tensor row = chain[static_cast<int64_t>(path.size()) - 1];
    worst_chain = std::max(worst_chain, max_diff(tree[node], row));
    EXPECT_EQ(tree[node].argmax().item<int64_t>(), row.argmax().item<int64_t>()) << "node " << node;
  }
  EXPECT_GT(max_depth, 2);  // a real tree, not only siblings
  EXPECT_LT(worst_chain, tol());
  EXPECT_LT(worst_packed, tol());
  // Grown in two forwards: nodes 0..5, then 6..11 with tree_cached = 6.
  KVCache grown = prefilled(*aten_of(GetParam()), kPrompt, P + n);
  ForwardOptions first, second;
  first.parents.assign(parents.begin(), parents.begin() + 6);
  second.parents = parents;
  second.tree_cached = 6;
  const at::Tensor a = aten_of(GetParam())->forward(ids_tensor({tokens.begin(), tokens.begin() + 6}), {P}, grown, first).logits[0];
  const at::Tensor b =
      aten_of(GetParam())->forward(ids_tensor({tokens.begin() + 6, tokens.end()}), {P + 6}, grown, second).logits[0];
  const float worst_grown = max_diff(at::cat({a, b}), tree);
  EXPECT_LT(worst_grown, tol());
  // The same trees with their parents as a tensor on the model's device (a drafter's unread
  // tree, ForwardOptions::device_parents): the same rows bit for bit, whole and grown, on both
  // engines (the packed engine copies them to the host first), with no host read.
  const auto on_device = [](const std::vector<int32_t>& p, int64_t cached) {
    ForwardOptions o;
    o.device_parents = at::tensor(p, at::kInt).to(at::kLong);
    o.tree_cached = cached;
    return o;
  };
  const std::vector<int32_t> first6(parents.begin(), parents.begin() + 6);
  KVCache cd = prefilled(*aten_of(GetParam()), kPrompt, P + n), cg = prefilled(*aten_of(GetParam()), kPrompt, P + n);
  const int64_t reads = host_reads();
  EXPECT_TRUE(aten_of(GetParam())->forward(ids_tensor(tokens), {P}, cd, on_device(parents, 0)).logits[0].equal(tree));
  EXPECT_TRUE(aten_of(GetParam())
                  ->forward(ids_tensor({tokens.begin(), tokens.begin() + 6}), {P}, cg, on_device(first6, 0))
                  .logits[0]
                  .equal(a));
  EXPECT_TRUE(aten_of(GetParam())
                  ->forward(ids_tensor({tokens.begin() + 6, tokens.end()}), {P + 6}, cg, on_device(parents, 6))
                  .logits[0]
                  .equal(b));
  KVCache cpd = prefilled(*packed_, kPrompt, P + n), cph = prefilled(*packed_, kPrompt, P + n);
  EXPECT_TRUE(packed_->forward(ids_tensor(tokens), {P}, cpd, on_device(parents, 0))
                  .logits.equal(packed_->forward(ids_tensor(tokens), {P}, cph, opt).logits));
  EXPECT_EQ(host_reads(), reads) << "a tree on the CPU is no read for the engines there";
  std::printf("tree of %lld nodes (depth %lld): max |tree - chain| = %.3g, |aten - packed| = %.3g, "
              "|grown - whole| = %.3g (threshold %.3g)\n",
              static_cast<long long>(n), static_cast<long long>(max_depth), worst_chain, worst_packed, worst_grown,
              tol());
}

// A layer subset with hidden outputs: logits, the final normed hidden state and the residual
// stream after a layer all match the packed engine (hidden states relative to their size:
// the residual stream of this model reaches values in the hundreds).
TEST_P(SmolLM2Aten, LayerSubsetAndHiddenOutputsMatchThePackedEngine) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), L = aten_of(GetParam())->config().n_layers;
  ForwardOptions opt;
  for (int64_t l = 0; l < L; l += 3) opt.layers.push_back(l);
  opt.final_hidden = true;
  opt.hidden_layer = L / 2;
  KVCache ca = prefilled(*aten_of(GetParam()), kPrompt, P + 4), cp = prefilled(*packed_, kPrompt, P + 4);
  const std::vector<int64_t> tokens = {198, 262, 446};
  const ForwardResult a = aten_of(GetParam())->forward(ids_tensor(tokens), {P}, ca, opt);
  const ForwardResult b = packed_->forward(ids_tensor(tokens), {P}, cp, opt);
  ASSERT_TRUE(a.logits.defined() && a.hidden.defined() && a.layer_hidden.defined());
  const float logits = max_diff(a.logits, b.logits);
  const float hidden = max_diff(a.hidden, b.hidden) / b.hidden.abs().max().item<float>();
  const float layer = max_diff(a.layer_hidden, b.layer_hidden) / b.layer_hidden.abs().max().item<float>();
  // Hidden states relative to their largest magnitude (float_bounds.h): the final normed state
  // after all 30 layers, the residual stream after layer L / 2 (L / 2 + 1 layers deep).
  const double hidden_bound = specdec::testing::relative_bound(kLayers, kLongestSum);
  const double layer_bound = specdec::testing::relative_bound(L / 2 + 1, kLongestSum);
  EXPECT_LT(logits, tol());
  EXPECT_LT(hidden, hidden_bound);
  EXPECT_LT(layer, layer_bound);
  // The skipped layers matter (the subset is not the full model).
  KVCache full = prefilled(*aten_of(GetParam()), kPrompt, P + 4);
  EXPECT_GT(max_diff(aten_of(GetParam())->forward(ids_tensor(tokens), {P}, full), a.logits), 1.0f);
  // Hidden states only: no logits.
  opt.logits = false;
  EXPECT_FALSE(aten_of(GetParam())->forward(ids_tensor(tokens), {P}, ca, opt).logits.defined());
  std::printf("layer subset: max |aten - packed| logits %.3g (threshold %.3g), hidden %.3g (relative; %.3g), "
              "layer %lld %.3g (relative; %.3g)\n", logits, tol(), hidden, hidden_bound, static_cast<long long>(L / 2),
              layer, layer_bound);
}

// Two sequences of different lengths in one batch (start positions 12 and 7 while decoding)
// give the rows each gives alone.
TEST_P(SmolLM2Aten, RaggedBatchEqualsSequencesAlone) {
  const int64_t P0 = static_cast<int64_t>(kPrompt.size()), P1 = static_cast<int64_t>(kPrompt2.size());
  const std::vector<int64_t> tail0(kPrompt.begin() + P1, kPrompt.end());  // 5 tokens
  const std::vector<int64_t> fed0 = {198, 262, 446}, fed1 = {90, 2730, 28};
  KVCache batch = aten_of(GetParam())->make_cache(2, 32);
  // Both prompts' first 7 tokens, then the first prompt's last 5 while the second rewrites its
  // own last 5 (the same tokens at the same slots), then three tokens each at 12 and 7.
  aten_of(GetParam())->forward(at::cat({ids_tensor({kPrompt.begin(), kPrompt.begin() + P1}), ids_tensor(kPrompt2)}), {0, 0},
                 batch);
  const at::Tensor r1 =
      aten_of(GetParam())->forward(at::cat({ids_tensor(tail0), ids_tensor({kPrompt2.begin() + 2, kPrompt2.end()})}), {P1, 2}, batch);
  ASSERT_EQ(batch.lengths(), (std::vector<int64_t>{P0, P1}));
  const at::Tensor r2 = aten_of(GetParam())->forward(at::cat({ids_tensor(fed0), ids_tensor(fed1)}), {P0, P1}, batch);
  ASSERT_EQ(batch.lengths(), (std::vector<int64_t>{P0 + 3, P1 + 3}));
  KVCache c0 = aten_of(GetParam())->make_cache(1, 32), c1 = aten_of(GetParam())->make_cache(1, 32);
  const at::Tensor s0 = aten_of(GetParam())->forward(ids_tensor(kPrompt), {0}, c0)[0];  // [12, V]
  const at::Tensor s1 = aten_of(GetParam())->forward(ids_tensor(kPrompt2), {0}, c1)[0];  // [7, V]
  const at::Tensor d0 = aten_of(GetParam())->forward(ids_tensor(fed0), {P0}, c0)[0], d1 = aten_of(GetParam())->forward(ids_tensor(fed1), {P1}, c1)[0];
  const float worst = std::max({max_diff(r1[0], s0.narrow(0, P1, P0 - P1)), max_diff(r1[1], s1.narrow(0, 2, P1 - 2)),
                                max_diff(r2[0], d0), max_diff(r2[1], d1)});
  EXPECT_LT(worst, tol());
  EXPECT_EQ(r2[0][2].argmax().item<int64_t>(), d0[2].argmax().item<int64_t>());
  EXPECT_EQ(r2[1][2].argmax().item<int64_t>(), d1[2].argmax().item<int64_t>());
  std::printf("ragged batch: max |batched - alone| = %.3g (threshold %.3g)\n", worst, tol());
}

// bf16 linear weights on the same file: close to fp32 and the same next token.
TEST_P(SmolLM2Aten, Bf16WeightsStayCloseToFloat32) {
  ModelSpec spec;
  spec.name = "smollm2-bf16";
  spec.path = kModel;
  spec.engine = "aten";
  spec.dtype = "bfloat16";
  spec.threads = 2;
  spec.graphs = GetParam();
  const auto bf16 = load(spec).model;
  KVCache c1 = aten_of(GetParam())->make_cache(1, 16), c2 = bf16->make_cache(1, 16);
  const at::Tensor a = aten_of(GetParam())->forward(ids_tensor(kPrompt), {0}, c1), b = bf16->forward(ids_tensor(kPrompt), {0}, c2);
  EXPECT_EQ(argmax_last(a), argmax_last(b));
  const float d = max_diff(a, b);
  EXPECT_LT(d, 2.0f);  // bf16: ~0.4% per weight and activation, over 30 layers
  std::printf("bf16 vs fp32 (aten): max |diff| = %.3g, bf16 weight bytes %lld vs %lld\n", d,
              static_cast<long long>(bf16->weight_bytes()), static_cast<long long>(aten_of(GetParam())->weight_bytes()));
}

INSTANTIATE_TEST_SUITE_P(Graphs, SmolLM2Aten, ::testing::Values("off", "on"),
                         [](const auto& info) { return "graphs_" + std::string(info.param); });

}  // namespace test_model_aten_smollm2
