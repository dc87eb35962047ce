#pragma once
// The options a user chooses for a model, in one type. model::ModelSpec (load()'s input: this
// and where the weights are), harness::ModelChoice (an experiment's models.target and
// models.draft: this and the catalog name) and `specdec generate`'s options embed it. Its fields
// are the CLI's --dtype/--threads/--device/--engine/--graphs, the experiment YAML's models.*
// keys (configs/README.md) and Python's specdec.load() arguments, with the same defaults.
// A light header (no ATen): the experiment schema includes it.
#include <cstdint>
#include <string>

namespace specdec::model {

struct ModelOptions {
  std::string dtype = "auto";     // "auto" | "float32" | "bfloat16" | "native" | "native_q8" |
                                  // "q4_1" (weights of linear layers; native: a GGUF file's own
                                  // blocks, native_q8 the same with int8 activations, panels.h;
                                  // q4_1: requantised to Q4_1 at load, lossy, for drafts;
                                  // auto: native for a Llama-family GGUF file on the packed
                                  // CPU engine, else float32 — load() records which)
  // The engine's threads (the thread pool of core/parallel.h; LibTorch's own stay at 1), set for
  // the whole process by load() (set_threads). 0: all cores. More than the cores this process may
  // use is refused unless threads_oversubscribe.
  // Default 2, the one default of `specdec generate --threads`, the YAML's models.threads and
  // Python's specdec.load(threads=): a fixed count, so that a figure does not depend on how many
  // cores the machine has and a run leaves the rest of a shared machine alone
  // (docs/busy_machine.md). Two commands choose all cores (0) themselves: `specdec models --load
  // --threads` and `specdec train-drafter --threads` (train::TrainOptions::threads).
  int threads = 2;
  bool threads_oversubscribe = false;  // allow more threads than the hardware runs at once; not an
                                       // experiment key: `specdec run --threads-oversubscribe`
                                       // (harness::RunOptions) sets it for both models
  uint64_t seed = 0;              // tiny random models only
  std::string device = "cpu";     // "cpu" | "cuda" | "cuda:N": where weights and KV cache live
                                  // (model/device.h)
  std::string engine = "auto";    // "auto" | "packed" | "aten". packed: the CPU kernels of
                                  // llama.h / gpt2.h; aten: llama_aten.h (ATen ops on `device`,
                                  // Llama family only); auto: packed on cpu, aten elsewhere
  std::string graphs = "auto";    // "auto" | "on" | "off": the ATen engine's static steps,
                                  // captured as CUDA graphs on a GPU (llama_aten.h); on the
                                  // CPU uncaptured, the GPU path's twin. auto: on for cuda
};

}  // namespace specdec::model
