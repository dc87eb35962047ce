// The ATen engine of the Llama family (llama_aten.h) on tiny random models, against the
// packed CPU engine over the same tensors: chains, decode steps, trees, ragged batches,
// Qwen2-style q/k/v biases, tied heads, bf16 weights. And the device/engine settings of
// model::load(): bad strings, CUDA that is not there, combinations the engine refuses.
#include <gtest/gtest.h>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/llama.h"
#include "model/llama_aten.h"
#include "model/loader.h"
#include "model/tiny.h"
#include "tests/support/float_bounds.h"

using namespace specdec;
using namespace specdec::model;

namespace {

at::Tensor random_tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {  // [B, T]
  Rng rng(seed);
  at::Tensor t = at::empty({B, T}, at::kLong);
  for (int64_t i = 0; i < B * T; ++i) t.data_ptr<int64_t>()[i] = static_cast<int64_t>(rng.next() % vocab);
  return t;
}

float max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<float>(); }
// max |a - b| relative to b's largest magnitude (the form of tests/support/float_bounds.h's bounds)
double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return max_diff(a, b) / std::max(b.abs().max().item<double>(), 1e-30);
}

// The bounds of two float32 engines that differ only in the order of their sums, on the tiny
// model (float_bounds.h's rounding model: C · depth · √K · u with K its longest reduction,
// d_ff = 64): the logits are n_layers + 1 reductions deep (3: ~2.9e-6), the final hidden state
// n_layers (2: ~1.9e-6). A dropped norm weight or a wrong mask moves them by 10^-2 and more
// (AnErrorInOneLayerFailsTheBound plants one).
double logit_bound(const ModelConfig& cfg) {
  return specdec::testing::relative_bound(cfg.n_layers + 1, std::max(cfg.d_model, cfg.d_ff));
}
double hidden_bound(const ModelConfig& cfg) {
  return specdec::testing::relative_bound(cfg.n_layers, std::max(cfg.d_model, cfg.d_ff));
}

// Runs the same forwards through both engines and returns the largest logit difference,
// relative to the packed engine's largest logit. forwards: prefill of 9, two decode steps, a
// 4-token tree, a rollback and re-verification. aten_tensors: the ATen engine's own weights
// (a planted error), else t.
double compare_engines(const ModelConfig& cfg, const LlamaTensors& t, const LlamaTensors* aten_tensors = nullptr) {
  auto packed = make_llama(cfg, t);
  auto aten = make_llama_aten(cfg, aten_tensors ? *aten_tensors : t, at::kFloat, at::kCPU);
  EXPECT_EQ(aten->device(), at::Device(at::kCPU));
  KVCache cp = packed->make_cache(1, 32), ca = aten->make_cache(1, 32);
  double worst = 0;
  auto both = [&](const at::Tensor& tokens, int64_t start, const ForwardOptions& o) {
    const ForwardResult a = packed->forward(tokens, {start}, cp, o), b = aten->forward(tokens, {start}, ca, o);
    EXPECT_EQ(b.logits.scalar_type(), at::kFloat);
    EXPECT_EQ(b.logits.sizes(), a.logits.sizes());
    EXPECT_EQ(cp.lengths(), ca.lengths());
    worst = std::max(worst, rel_diff(b.logits, a.logits));
  };
  both(random_tokens(1, 9, cfg.n_vocab, 1), 0, {});
  both(random_tokens(1, 1, cfg.n_vocab, 2), 9, {});
  both(random_tokens(1, 1, cfg.n_vocab, 3), 10, {});
  ForwardOptions tree;
  tree.parents = {-1, 0, -1, 2};  // two roots: node 2 must not see node 0
  both(random_tokens(1, 4, cfg.n_vocab, 4), 11, tree);
  both(random_tokens(1, 5, cfg.n_vocab, 5), 10, {});  // rollback: overwrite slots 10..14
  return worst;
}

// The sizes of the buffers c10's allocators hand out on this thread while it lives, in order
// (the allocators' profiler hook, which the CPU and CUDA allocators both call).
class AllocationLog : public c10::MemoryReportingInfoBase {
  // The totals are int64_t in LibTorch 1.x and size_t in 2.x: take them from the base.
  template <typename>
  struct Totals;
  template <typename C, typename A, typename B>
  struct Totals<void (C::*)(void*, int64_t, A, B, c10::Device)> {
    using Allocated = A;
    using Reserved = B;
  };
  using T = Totals<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>;

 public:
  void reportMemoryUsage(void*, int64_t size, T::Allocated, T::Reserved, c10::Device) override {
    if (size > 0) sizes.push_back(size);  // a free reports its size negated
  }
  bool memoryProfilingEnabled() const override { return true; }
  std::vector<int64_t> sizes;
};

std::vector<int64_t> allocations_of(const std::function<void()>& f) {
  auto log = std::make_shared<AllocationLog>();
  {
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, log);
    f();
  }
  return log->sizes;
}

TEST(LlamaAten, TinyModelMatchesThePackedEngine) {
  ModelConfig cfg = tiny_llama_config();
  const double untied = compare_engines(cfg, make_tiny_llama_tensors(cfg, 7));
  LlamaTensors tied = make_tiny_llama_tensors(cfg, 8);
  tied.output = at::Tensor();
  const double tied_diff = compare_engines(cfg, tied);
  cfg.qkv_bias = true;  // Qwen2
  const double bias = compare_engines(cfg, make_tiny_llama_tensors(cfg, 9));
  EXPECT_LT(untied, logit_bound(cfg));
  EXPECT_LT(tied_diff, logit_bound(cfg));
  EXPECT_LT(bias, logit_bound(cfg));
  std::printf("max |aten - packed| / max |logit|: untied %.3g, tied %.3g, qkv bias %.3g (bound %.3g)\n", untied,
              tied_diff, bias, logit_bound(cfg));
}

// The bound still sees a real error: the ATen engine given one layer's attention norm weight
// as ones (a dropped norm weight), or the same weight off by 2^-10 relative (a fault far
// smaller than any real bug, yet ~100x the rounding noise; an error near the noise itself,
// a few ulps, no such bound can see: float_bounds.h).
TEST(LlamaAten, AnErrorInOneLayerFailsTheBound) {
  const ModelConfig cfg = tiny_llama_config();
  const LlamaTensors w = make_tiny_llama_tensors(cfg, 7);
  LlamaTensors dropped = w, nudged = w;
  dropped.layers[1].attn_norm = at::ones_like(w.layers[1].attn_norm);
  nudged.layers[1].attn_norm = w.layers[1].attn_norm * (1 + 1.0 / 1024);
  const double d_dropped = compare_engines(cfg, w, &dropped), d_nudged = compare_engines(cfg, w, &nudged);
  std::printf("planted: dropped norm %.3g, norm off by 2^-10 %.3g (bound %.3g)\n", d_dropped, d_nudged,
              logit_bound(cfg));
  EXPECT_GT(d_dropped, logit_bound(cfg));
  EXPECT_GT(d_nudged, logit_bound(cfg));
}

// What a CUDA graph needs of a static step (issue 31, "no allocation inside a captured step"):
// every run of one step allocates the same buffers, whatever its inputs, so that a replay finds
// them where the capture put them. On the CPU twin the step runs every time, so each run's
// allocations can be logged: a forward of a bucket (3 fed tokens: bucket 4, one padding row) at
// other positions, with other tokens, as a chain or a tree, allocates the same sizes in the same
// order. The eager path over the same forwards allocates by position (its attention spans only
// the filled slots), which shows that the log sees what a position-dependent step would do.
TEST(LlamaAten, StaticStepsAllocateTheSameBuffersWhateverTheirInputs) {
  const ModelConfig cfg = tiny_llama_config();
  const LlamaTensors w = make_tiny_llama_tensors(cfg, 5);
  for (const int64_t B : {1, 2}) {
    SCOPED_TRACE("batch " + std::to_string(B));
    std::vector<std::vector<int64_t>> logs[2];  // [eager, static]: one per forward
    for (const bool static_steps : {false, true}) {
      auto m = make_llama_aten(cfg, w, at::kFloat, at::kCPU, static_steps);
      KVCache c = m->make_cache(B, 40);
      m->forward(random_tokens(B, 30, cfg.n_vocab, 21), std::vector<int64_t>(B, 0), c);
      ForwardOptions tree;
      tree.parents = {-1, 0, 0};
      const struct {
        int64_t start;
        bool tree;
      } forwards[] = {{27, false}, {27, false}, {20, true}, {23, false}, {12, true}, {15, false}};  // rollbacks
      uint64_t seed = 30;
      for (const auto& f : forwards) {
        std::vector<int64_t> start(B, f.start);
        if (B == 2) start[1] = f.start - 7;  // rows of one step at other positions
        const at::Tensor tokens = random_tokens(B, 3, cfg.n_vocab, ++seed);
        logs[static_steps].push_back(
            allocations_of([&] { m->forward(tokens, start, c, f.tree ? tree : ForwardOptions{}); }));
      }
    }
    const auto& eager = logs[0];
    const auto& fixed = logs[1];
    ASSERT_FALSE(fixed[1].empty());
    EXPECT_NE(eager[1], eager.back()) << "the log did not see the eager path's position-dependent buffers";
    // fixed[0] also built the step (its input buffer): the runs after it are the replays.
    for (size_t i = 2; i < fixed.size(); ++i)
      EXPECT_EQ(fixed[i], fixed[1]) << "forward " << i << " of the static step allocated other buffers than forward 1";
    std::printf("batch %lld: the static step allocates %zu buffers a forward; the eager path %zu and %zu\n",
                static_cast<long long>(B), fixed[1].size(), eager[1].size(), eager.back().size());
  }
}

// The same for a tree grown over several forwards (the tree drafter's growth): 3 fed nodes
// with tree_cached = 2 nodes already in the cache, at other positions and with other tokens,
// take one static step (bucket 4, ancestor columns 6); the eager path allocates by position.
TEST(LlamaAten, GrowingTreesTakeStaticStepsToo) {
  const ModelConfig cfg = tiny_llama_config();
  const LlamaTensors w = make_tiny_llama_tensors(cfg, 5);
  ForwardOptions grow;
  grow.parents = {-1, -1, 0, 1, 0};  // nodes 0, 1 cached; 2..4 fed
  grow.tree_cached = 2;
  std::vector<std::vector<int64_t>> logs[2];
  at::Tensor rows[2];
  for (const bool static_steps : {false, true}) {
    auto m = make_llama_aten(cfg, w, at::kFloat, at::kCPU, static_steps);
    KVCache c = m->make_cache(1, 40);
    m->forward(random_tokens(1, 30, cfg.n_vocab, 21), {0}, c);
    uint64_t seed = 40;
    for (const int64_t start : {29, 29, 22, 25, 14}) {
      const at::Tensor tokens = random_tokens(1, 3, cfg.n_vocab, ++seed);
      logs[static_steps].push_back(allocations_of([&] { rows[static_steps] = m->forward(tokens, {start}, c, grow).logits; }));
    }
  }
  // Both paths compute the same rows (the last forward's), up to the order of their sums.
  EXPECT_LT(rel_diff(rows[1], rows[0]), logit_bound(cfg));
  const auto& eager = logs[0];
  const auto& fixed = logs[1];
  ASSERT_FALSE(fixed[1].empty());
  EXPECT_NE(eager[1], eager.back()) << "the log did not see the eager path's position-dependent buffers";
  for (size_t i = 2; i < fixed.size(); ++i)
    EXPECT_EQ(fixed[i], fixed[1]) << "growth forward " << i << " did not replay the static step of forward 1";
}

// Two sequences at different start positions in one forward give the rows each gives alone;
// for a tree too (tree_cached > 0: a tree grown over two forwards).
TEST(LlamaAten, RaggedBatchAndGrowingTreeEqualSequencesAlone) {
  const ModelConfig cfg = tiny_llama_config();
  auto m = make_llama_aten(cfg, make_tiny_llama_tensors(cfg, 3), at::kFloat, at::kCPU);
  const at::Tensor p0 = random_tokens(1, 10, cfg.n_vocab, 11), p1 = random_tokens(1, 6, cfg.n_vocab, 12);
  const at::Tensor fed = random_tokens(2, 4, cfg.n_vocab, 13);
  ForwardOptions first, second;
  first.parents = {-1, 0};
  second.parents = {-1, 0, 1, 0};
  second.tree_cached = 2;
  // Batched: prefix lengths 10 and 6 (the second written at 0..5 and then rewritten), then the
  // first two tree nodes, then the other two.
  KVCache c = m->make_cache(2, 32);
  m->forward(at::cat({p0.narrow(1, 0, 6), p1}), {0, 0}, c);
  m->forward(at::cat({p0.narrow(1, 6, 4), p1.narrow(1, 2, 4)}), {6, 2}, c);
  ASSERT_EQ(c.lengths(), (std::vector<int64_t>{10, 6}));
  const at::Tensor a1 = m->forward(fed.narrow(1, 0, 2), {10, 6}, c, first).logits;
  const at::Tensor a2 = m->forward(fed.narrow(1, 2, 2), {12, 8}, c, second).logits;
  ASSERT_EQ(c.lengths(), (std::vector<int64_t>{14, 10}));
  for (int64_t b = 0; b < 2; ++b) {
    KVCache alone = m->make_cache(1, 32);
    const at::Tensor prompt = b == 0 ? p0 : p1;
    const int64_t P = prompt.size(1);
    m->forward(prompt, {0}, alone);
    const at::Tensor r1 = m->forward(fed[b].narrow(0, 0, 2).view({1, 2}), {P}, alone, first).logits;
    const at::Tensor r2 = m->forward(fed[b].narrow(0, 2, 2).view({1, 2}), {P + 2}, alone, second).logits;
    EXPECT_LT(rel_diff(a1[b], r1[0]), logit_bound(cfg)) << "sequence " << b;
    EXPECT_LT(rel_diff(a2[b], r2[0]), logit_bound(cfg)) << "sequence " << b;
  }
}

TEST(LlamaAten, Bf16WeightsStayCloseToFloat32) {
  const ModelConfig cfg = tiny_llama_config();
  const LlamaTensors t = make_tiny_llama_tensors(cfg, 5);
  auto f32 = make_llama_aten(cfg, t, at::kFloat, at::kCPU);
  auto bf16 = make_llama_aten(cfg, t, at::kBFloat16, at::kCPU);
  EXPECT_LT(bf16->weight_bytes(), f32->weight_bytes());
  KVCache c1 = f32->make_cache(1, 16), c2 = bf16->make_cache(1, 16);
  const at::Tensor tokens = random_tokens(1, 12, cfg.n_vocab, 6);
  const at::Tensor a = f32->forward(tokens, {0}, c1), b = bf16->forward(tokens, {0}, c2);
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  // bf16 keeps 8 bits of mantissa: about 0.4% per weight and activation.
  EXPECT_LT(max_diff(a, b), 0.05f * a.abs().max().item<float>());
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LlamaAten, RefusesGgufBlocksAndBadDtypes) {
  const ModelConfig cfg = tiny_llama_config();
  LlamaTensors t = make_tiny_llama_tensors(cfg, 1);
  expect_error([&] { make_llama_aten(cfg, t, at::kHalf, at::kCPU); }, "weight dtype Half is not supported");
  // A layer's projection given as GGUF blocks (never read: the engine refuses it first).
  const uint8_t block[4] = {};
  t.layers[1].native.wk.name = "blk.1.attn_k.weight";
  t.layers[1].native.wk.data = block;
  expect_error([&] { make_llama_aten(cfg, t, at::kFloat, at::kCPU); }, "tensor layers[1].wk");
}

// Ragged batches (ForwardOptions::n_fed) and a tree per sequence, on the eager path and the
// static steps: every fed row equals the packed engine's (the reference for both), the rows
// past n_fed[b] are zero and their ids are never read (out of range here), and each cache ends
// at start + n_fed[b] with its earlier slots intact, as the next forwards (a rollback among
// them) show.
TEST(LlamaAten, RaggedBatchesAndTreesPerSequenceMatchThePackedEngine) {
  const ModelConfig cfg = tiny_llama_config();
  const LlamaTensors w = make_tiny_llama_tensors(cfg, 4);
  auto packed = make_llama(cfg, w);
  for (const bool static_steps : {false, true}) {
    SCOPED_TRACE(static_steps ? "static steps" : "eager");
    auto aten = make_llama_aten(cfg, w, at::kFloat, at::kCPU, static_steps);
    EXPECT_TRUE(aten->ragged_batches());
    KVCache cp = packed->make_cache(3, 40), ca = aten->make_cache(3, 40);
    const struct {
      std::vector<int64_t> start, n_fed;
      std::vector<int32_t> parents;
      int64_t T;
    } forwards[] = {
        {{0, 0, 0}, {9, 5, 7}, {}, 9},               // prompts of three lengths
        {{9, 5, 7}, {4, 1, 0}, {}, 4},               // chains; the third sequence feeds nothing
        {{13, 6, 7}, {4, 3, 2}, {-1, 0, 0, 1}, 4},   // one tree for all, cut at n_fed
        {{14, 7, 8}, {2, 2, 1}, {}, 2},              // a rollback
        {{16, 9, 9}, {4, 3, 2}, {-1, 0, 1, 2, -1, 0, 0, 1, -1, -1, 0, 1}, 4},  // a tree each
        {{20, 12, 11}, {}, {}, 1},                   // a plain decode step over what is cached
    };
    uint64_t seed = 40;
    for (const auto& f : forwards) {
      const int64_t B = 3, T = f.T;
      at::Tensor tokens = random_tokens(B, T, cfg.n_vocab, ++seed);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = f.n_fed.empty() ? T : f.n_fed[b]; t < T; ++t) tokens[b][t] = -7;
      ForwardOptions o;
      o.n_fed = f.n_fed;
      o.parents = f.parents;
      o.final_hidden = true;
      const ForwardResult a = packed->forward(tokens, f.start, cp, o), b = aten->forward(tokens, f.start, ca, o);
      ASSERT_EQ(b.logits.sizes(), a.logits.sizes());
      EXPECT_EQ(ca.lengths(), cp.lengths());
      for (int64_t s = 0; s < B; ++s) {
        const int64_t fed = f.n_fed.empty() ? T : f.n_fed[s];
        for (int64_t t = 0; t < T; ++t) {
          SCOPED_TRACE("sequence " + std::to_string(s) + " row " + std::to_string(t));
          if (t < fed) {
            EXPECT_LT(rel_diff(b.logits[s][t], a.logits[s][t]), logit_bound(cfg));
            EXPECT_LT(rel_diff(b.hidden[s][t], a.hidden[s][t]), hidden_bound(cfg));
          } else {
            EXPECT_EQ(b.logits[s][t].abs().max().item<float>(), 0.0f);
            EXPECT_EQ(b.hidden[s][t].abs().max().item<float>(), 0.0f);
          }
        }
      }
    }
  }
}

TEST(ModelDevice, ParsesDevicesAndEngines) {
  EXPECT_EQ(parse_device("cpu"), at::Device(at::kCPU));
  EXPECT_EQ(parse_device("cuda"), at::Device(at::kCUDA));
  EXPECT_EQ(parse_device("cuda:3"), at::Device(at::kCUDA, 3));
  for (const char* bad : {"", "CPU", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1000", "cuda:0 ", "mps"})
    expect_error([&] { parse_device(bad, "model m"); }, std::string("model m: device '") + bad + "' is not valid");
  EXPECT_EQ(parse_engine("auto", at::kCPU), Engine::kPacked);
  EXPECT_EQ(parse_engine("auto", at::Device(at::kCUDA)), Engine::kAten);
  EXPECT_EQ(parse_engine("aten", at::kCPU), Engine::kAten);
  EXPECT_EQ(parse_engine("packed", at::kCPU), Engine::kPacked);
  expect_error([] { parse_engine("packed", at::Device(at::kCUDA, 1), "model m"); },
               "model m: engine packed runs on the CPU only, but device cuda:1");
  for (const char* bad : {"", "Aten", "torch", "gpu"})
    expect_error([&] { parse_engine(bad, at::kCPU, "model m"); }, std::string("model m: engine '") + bad + "'");
}

ModelSpec spec(const std::string& path, const std::string& device, const std::string& engine) {
  ModelSpec s;
  s.name = "m1";
  s.path = path;
  s.device = device;
  s.engine = engine;
  s.threads = 1;
  return s;
}

TEST(ModelDevice, LoadNamesTheModelAndTheDevice) {
  const std::string missing = "models/does-not-exist.gguf";
  if (!at::hasCUDA()) {
    // The device is checked before the file is opened.
    expect_error([&] { load(spec(missing, "cuda", "auto")); },
                 "model m1: device cuda requested, but this LibTorch build has no CUDA");
    expect_error([&] { load(spec(missing, "cuda:1", "aten")); }, "model m1: device cuda:1 requested");
    const ModelConfig cfg = tiny_llama_config();
    expect_error([&] { make_llama_aten(cfg, make_tiny_llama_tensors(cfg, 1), at::kFloat, at::Device(at::kCUDA)); },
                 "llama aten engine: device cuda requested, but this LibTorch build has no CUDA");
  }
  expect_error([&] { load(spec(missing, "gpu", "auto")); }, "model m1: device 'gpu' is not valid");
  expect_error([&] { load(spec(missing, "cpu", "fast")); }, "model m1: engine 'fast' is not valid");
  expect_error([&] { load(spec(missing, "cuda", "packed")); }, "model m1: engine packed runs on the CPU only");
  expect_error([&] { load(spec("tiny-llama", "cpu", "aten")); }, "tiny-llama runs on the packed CPU engine only");
  expect_error([&] { load(spec("tiny-gpt2", "cpu", "aten")); }, "tiny-gpt2 runs on the packed CPU engine only");
  ModelSpec native = spec(missing, "cpu", "aten");
  native.dtype = "native";
  expect_error([&] { load(native); }, "model m1: dtype native keeps GGUF blocks for the packed CPU engine");
  // The defaults still load the packed engine on the CPU.
  const LoadedModel tiny = load(spec("tiny-llama", "cpu", "auto"));
  EXPECT_EQ(tiny.model->device(), at::Device(at::kCPU));
}

}  // namespace
