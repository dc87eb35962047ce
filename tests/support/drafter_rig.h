#pragma once
// Shared set-up of the strategy and drafter unit tests: cached tiny models, parameter maps,
// a drafter built the way Speculative::make_drafter builds it, and the text of an error.
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "model/tiny.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"

namespace specdec::test_support {

// The tiny random Llama of this seed, built once per test binary.
inline std::shared_ptr<model::CausalLM> tiny(uint64_t seed) {
  static std::map<uint64_t, std::shared_ptr<model::CausalLM>> cache;
  auto& m = cache[seed];
  if (!m) m = model::make_tiny_llama(model::tiny_llama_config(), seed);
  return m;
}

inline strategies::Params P(std::map<std::string, std::string> values) { return strategies::Params(std::move(values)); }

// A run's disjoint phases cover its wall time within 5 % (+ slack_ms, for a batch's sequences of
// a few ms). On a busy machine a moment descheduled between two phases' clocks can leave a run
// short: the tests retry up to three runs (test_strategies_phases, test_strategies_batch).
inline bool phases_add_up(const strategies::Stats& s, double slack_ms = 0) {
  return std::abs(s.phase_ms.sum() - s.ms_total) <= 0.05 * s.ms_total + slack_ms;
}

// What Speculative::make_drafter passes to the registry, built from user-style parameters.
struct Rig {
  strategies::Request req;
  strategies::Params params;
  sampling::ProcessorConfig proc;
  Rng rng{0};
  explicit Rig(std::map<std::string, std::string> given)
      : params(strategies::resolve("speculative", P(std::move(given)))), proc(strategies::processor_config(params)) {}
  // Rig({{"gamma", "3"}}) and Rig(): brace lists resolve here, not to the copy constructor.
  Rig(std::initializer_list<std::pair<const std::string, std::string>> given = {})
      : Rig(std::map<std::string, std::string>(given)) {}
  std::unique_ptr<strategies::Drafter> make(const std::string& name) {
    return strategies::make_drafter(name,
                                    strategies::DrafterContext{req, params, proc, rng, 512, params.get_int("gamma_max")});
  }
};

// The message of the specdec::Error f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace specdec::test_support
