#pragma once
// Wall-clock stopwatch for per-phase statistics.
#include <chrono>

namespace specdec {

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  explicit Stopwatch(std::chrono::steady_clock::time_point start) : start_(start) {}
  void reset() { start_ = Clock::now(); }
  double ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - start_).count(); }
  double seconds() const { return ms() / 1000.0; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Adds the elapsed time of a scope to a counter (in ms): { ScopedTimer t(ms_load); ... }
class ScopedTimer {
 public:
  explicit ScopedTimer(double& acc_ms) : acc_(acc_ms) {}
  ~ScopedTimer() { acc_ += sw_.ms(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& acc_;
  Stopwatch sw_;
};

}  // namespace specdec
