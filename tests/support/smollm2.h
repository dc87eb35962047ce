#pragma once
// SmolLM2-135M (CI's real model, scripts/fetch_models.sh smollm2-135m), loaded once per test
// program on 2 threads and shared by its tests.
#include <string>

#include "model/causal_lm.h"
#include "tests/support/paths.h"

namespace specdec::testing_support {

inline const std::string kSmolLM2 = source_dir() + "/models/smollm2-135m-instruct.gguf";

inline const model::LoadedModel& smollm2() {
  static const model::LoadedModel m = [] {
    model::set_threads(2);
    model::ModelSpec spec;
    spec.name = "smollm2-135m";
    spec.path = kSmolLM2;
    spec.threads = 2;
    return model::load(spec);
  }();
  return m;
}

}  // namespace specdec::testing_support
