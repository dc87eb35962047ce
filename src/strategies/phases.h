#pragma once
// Where a generation's wall time goes: a breakdown into phases that add up to the measured
// total, so the Leviathan et al. cost model (draft and target forwards only) can be compared
// with everything else a real decoding loop spends time on.
#include <chrono>
#include <vector>

namespace specdec::strategies {

// Milliseconds per phase of one generation (or, summed, of many). Every phase but
// draft_catchup is disjoint from the others; sum() of them is the wall time of generate().
struct PhaseTimes {
  double setup = 0;        // request checks, KV-cache allocation, drafter construction
  double prefill = 0;      // prompt forwards (target and draft model)
  double draft = 0;        // proposing: draft-model forwards (n-gram: the lookup)
  double verify = 0;       // target forwards after prefill (scoring a draft, or one decode step)
  double sample = 0;       // logits processors, probabilities, sampling, the verification kernel
  double accept = 0;       // committing tokens: StopTracker, detokenisation, streaming callback
  double rollback = 0;     // KV-cache truncation of target and draft
  double logits_copy = 0;  // copies of logits / probabilities (q assembled from its rows)
  double other = 0;        // remaining loop bookkeeping (sequences, counters, gamma control)
  // Part of draft, not a phase of its own: the first draft forward of each round, which feeds
  // the tokens the previous round committed (its correction or bonus token, and x_k after a
  // full accept) and yields q for x_1.
  double draft_catchup = 0;
  // Part of sample, not a phase of its own: structured output's grammar work on the target's
  // rows (sampling::ConstraintState: the masks, the forced and jump-forward tokens). A drafter's
  // own masks count as draft.
  double grammar = 0;

  struct Field {
    const char* name;         // JSON key and column name
    double PhaseTimes::*ms;
    bool summed;              // false for sub-figures (draft_catchup, part of draft)
    const char* help;
  };
  // All fields in report order; every printer (CLI, JSON, CSV, report.md) iterates this.
  static const std::vector<Field>& fields();

  double sum() const;  // the disjoint phases (everything but draft_catchup)
  PhaseTimes& operator+=(const PhaseTimes& o);
  PhaseTimes& operator-=(const PhaseTimes& o);  // a span's share: totals now minus totals then
};

// Splits a span of wall time into consecutive phases: charge(&PhaseTimes::x) adds the time
// since the previous charge (or construction) to x. Each charge is a measured interval, and
// consecutive intervals leave no gap and no overlap, so the phases add up to the span; a phase
// that is forgotten shows up as time charged to the wrong name, never as missing time.
class PhaseClock {
 public:
  explicit PhaseClock(PhaseTimes& out) : out_(out), last_(Clock::now()) {}
  // Returns the milliseconds charged.
  double charge(double PhaseTimes::*phase);
  // For a call that timed itself (a drafter's PhaseTimes): charges the callee's parts as they
  // are and the rest of the interval since the last charge (the call itself, or all of it for
  // a callee that times nothing) to `rest`. Returns the whole interval in ms.
  double charge_parts(const PhaseTimes& parts, double PhaseTimes::*rest);

  using Clock = std::chrono::steady_clock;
  // The instant of the last charge, up to which totals() is complete: a span that starts there
  // (a batched sequence joining) gets the phase times charged since as its share.
  Clock::time_point last() const { return last_; }
  const PhaseTimes& totals() const { return out_; }

 private:
  double lap_ms();
  PhaseTimes& out_;
  Clock::time_point last_;
};

}  // namespace specdec::strategies
