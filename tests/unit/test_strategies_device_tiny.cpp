// The device path of the decoding loop on a tiny random Llama (vocab 32, 2 layers, d_model 32) on
// the ATen engine: the tests of tests/support/strategies_device_cases.h in seconds, the fast
// tier's twin of tests/integration/test_strategies_device_smollm2.cpp. The same checks, on "cpu"
// (eager) and "cpu_graphs" (the static steps on the CPU, which a GPU captures): greedy speculative
// decoding equals greedy for chains and trees with partial rejections, aten greedy equals the
// packed engine's, batches equal batch 1, seeded sampling is reproducible, one host read a greedy
// step and a speculative round, and fresh EAGLE/Medusa heads drafting where the target is.
//
// The draft is the target's first layer alone; the output head is scaled (kHeadScale) so that
// greedy's top two logits are rarely close (the engines and the tree/chain forwards agree to
// rounding only) while the one-layer draft still disagrees often: the tests print the accepted
// and drafted counts.
#include <stdexcept>

#include "model/layer_subset.h"
#include "model/llama_aten.h"
#include "model/tiny.h"
#include "tests/support/grammar_tiny.h"
#include "tests/support/strategies_device_cases.h"

namespace {

constexpr uint64_t kSeed = 11;
constexpr double kHeadScale = 4.0;

model::LoadedModel load_tiny(const std::string& device, const std::string& engine) {
  if (is_cuda(device)) throw std::runtime_error("the tiny twin runs on the CPU (cpu, cpu_graphs) only");
  const model::ModelConfig c = model::tiny_llama_config();
  model::LlamaTensors t = model::make_tiny_llama_tensors(c, kSeed);
  t.output = t.output * kHeadScale;
  model::LoadedModel m;
  m.spec.name = "tiny-llama";
  m.spec.path = "tiny-llama";
  m.spec.seed = kSeed;
  m.spec.device = "cpu";
  m.spec.engine = engine;
  if (engine == "packed") {
    if (device != "cpu") throw std::runtime_error("the packed engine runs on the plain cpu param only");
    m.model = model::make_llama(c, std::move(t));
  } else {
    m.spec.graphs = device == "cpu_graphs" ? "on" : "off";
    m.model = model::make_llama_aten(c, std::move(t), at::kFloat, at::kCPU, /*static_steps=*/device == "cpu_graphs");
  }
  return m;
}

}  // namespace

const specdec::testing_support::DeviceTarget& dut() {
  static const specdec::testing_support::DeviceTarget t = [] {
    specdec::testing_support::DeviceTarget t;
    t.name = "tiny-llama-" + std::to_string(kSeed);
    t.load = load_tiny;
    t.skipping_draft = [](const std::shared_ptr<model::CausalLM>& target) {
      return model::make_layer_subset(target, {0});
    };
    t.prompt = [](const model::LoadedModel&, size_t i) {
      static const std::vector<Tokens> prompts = {
          {1, 5, 9, 5, 9, 3, 1, 5, 9}, {2, 7, 7, 1, 4, 8, 2, 7, 11, 30, 2, 7}, {3, 3, 1, 2}};
      return prompts.at(i);
    };
    t.static_tests_on_eager = true;  // seconds here: the eager path runs them too
    // Structured output needs a tokenizer: the structured-output tests' tiny chat Llama
    // (tests/support/grammar_tiny.h: byte vocabulary, ChatML control tokens), on the aten engine.
    t.load_with_tokenizer = [](const std::string& device) {
      return testing_support::grammar_tiny::load_chat_tiny("device_chat.gguf", {}, "aten",
                                                           device == "cpu_graphs" ? "on" : "off");
    };
    return t;
  }();
  return t;
}

namespace {

INSTANTIATE_TEST_SUITE_P(Tiny, OnDevice, ::testing::Values("cpu", "cpu_graphs"),
                         [](const auto& info) { return info.param; });

}  // namespace
