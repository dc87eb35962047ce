#pragma once
// Progress on stderr: a live bar with cell, prompt and ETA when stderr is a terminal;
// otherwise only one line per finished cell (logs stay readable).
#include <cstdint>
#include <string>

#include "core/timer.h"

namespace specdec::harness {

class Progress {
 public:
  Progress(int64_t n_cells, int64_t total_units, bool enabled);
  void start_cell(int64_t index, const std::string& name);
  // One unit = one generate() call. `what` says what is running ("prompt 2/4 repeat 1/3").
  void step(const std::string& what);
  void finish_cell(const std::string& summary);
  void skip_cell(int64_t units);  // a cell resumed from disk

 private:
  std::string eta() const;
  bool tty_, enabled_;
  int64_t n_cells_, total_units_, done_units_ = 0, run_units_ = 0, cell_ = 0;
  std::string name_;
  Stopwatch clock_;
};

}  // namespace specdec::harness
