#include "strategies/phases.h"

#include <algorithm>

namespace specdec::strategies {

const std::vector<PhaseTimes::Field>& PhaseTimes::fields() {
  static const std::vector<Field> f = {
      {"setup", &PhaseTimes::setup, true, "request checks, KV-cache allocation, drafter construction"},
      {"prefill", &PhaseTimes::prefill, true, "prompt forwards of target and draft"},
      {"draft", &PhaseTimes::draft, true, "draft-model forwards, catch-up included (n-gram: lookup)"},
      {"draft_catchup", &PhaseTimes::draft_catchup, false,
       "part of draft: the first draft forward of a round (feeds the previous round's committed tokens)"},
      {"verify", &PhaseTimes::verify, true, "target forwards after prefill"},
      {"sample", &PhaseTimes::sample, true, "logits processors, probabilities, sampling, verification kernel"},
      {"grammar", &PhaseTimes::grammar, false,
       "part of sample: structured output's masks of the target's rows, forced and jump-forward tokens"},
      {"accept", &PhaseTimes::accept, true, "stop tracking, detokenisation, streaming callback"},
      {"rollback", &PhaseTimes::rollback, true, "KV-cache truncation"},
      {"logits_copy", &PhaseTimes::logits_copy, true, "copies of logits / probabilities (q from its rows)"},
      {"other", &PhaseTimes::other, true, "remaining loop bookkeeping"},
  };
  return f;
}

double PhaseTimes::sum() const {
  double s = 0;
  for (const auto& f : fields())
    if (f.summed) s += this->*f.ms;
  return s;
}

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  for (const auto& f : fields()) this->*f.ms += o.*f.ms;
  return *this;
}

PhaseTimes& PhaseTimes::operator-=(const PhaseTimes& o) {
  for (const auto& f : fields()) this->*f.ms -= o.*f.ms;
  return *this;
}

double PhaseClock::lap_ms() {
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
  last_ = now;
  return ms;
}

double PhaseClock::charge(double PhaseTimes::*phase) {
  const double ms = lap_ms();
  out_.*phase += ms;
  return ms;
}

double PhaseClock::charge_parts(const PhaseTimes& parts, double PhaseTimes::*rest) {
  const double ms = lap_ms();
  out_ += parts;
  // The callee's clock ran inside this interval, so its parts cannot exceed it (clamped
  // against clock granularity all the same).
  out_.*rest += std::max(0.0, ms - parts.sum());
  return ms;
}

}  // namespace specdec::strategies
