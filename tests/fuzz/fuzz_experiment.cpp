// libFuzzer target for the experiment loader: harness::parse_experiment (YAML -> typed config,
// src/harness/experiment.cpp) and harness::make_plan (strategy names, parameters and sweep
// values checked against the real strategy registry; src/harness/plan.cpp), as
// `specdec validate` runs them, minus the model lookup. The input is the YAML text; each NUL
// byte starts one --set override ("key.path=value"). Relative prompt and report files resolve
// next to the experiment, in a scratch folder holding prompts.jsonl (the Spec-Bench seed of
// fuzz_prompts) and context.md.
// Properties: loading either succeeds or throws specdec::Error, nothing else; an accepted
// config prints its plan, and its resolved YAML (to_yaml, what a run stores and --resume
// compares) loads back to the same resolved YAML.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "harness/experiment.h"
#include "harness/plan.h"
#include "tests/support/paths.h"

namespace {

const specdec::fuzz::ScratchDir& scratch() {
  static const specdec::fuzz::ScratchDir dir;
  return dir;
}

void setup() {
  specdec::fuzz::write_file(scratch().file("prompts.jsonl"),
                            specdec::fuzz::read_file(specdec::testing_support::source_dir() +
                                                     "/tests/fuzz/seeds_prompts/spec_bench.jsonl.seed"));
  specdec::fuzz::write_file(scratch().file("context.md"), "# Context\n\nMachine notes.\n");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setup();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace h = specdec::harness;
  auto parts = specdec::fuzz::split_nul(data, size);
  const std::string yaml = parts[0];
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  const std::string file = scratch().file("fuzz.yaml");
  h::ExperimentConfig cfg;
  try {
    cfg = h::parse_experiment(yaml, file, overrides);
    const h::Plan plan = h::make_plan(cfg, /*check_models=*/false);
    (void)h::format_plan(cfg, plan);
  } catch (const specdec::Error&) {
    return 0;  // rejected with a message: fine
  }
  const std::string resolved = h::to_yaml(cfg);
  try {
    const h::ExperimentConfig again = h::parse_experiment(resolved, file);
    const std::string resolved_again = h::to_yaml(again);
    if (resolved_again != resolved)
      specdec::fuzz::property_failed("the resolved config does not load back to itself:\n--- first\n" + resolved +
                                     "--- reloaded\n" + resolved_again);
  } catch (const specdec::Error& e) {
    specdec::fuzz::property_failed(std::string("the resolved config of an accepted experiment is rejected: ") +
                                   e.what() + "\n--- resolved\n" + resolved);
  }
  return 0;
}
