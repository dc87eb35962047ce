#include "harness/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace specdec::harness {

Progress::Progress(int64_t n_cells, int64_t total_units, bool enabled)
    : tty_(::isatty(STDERR_FILENO) != 0), enabled_(enabled), n_cells_(n_cells), total_units_(total_units) {}

std::string Progress::eta() const {
  if (run_units_ == 0) return "--";
  const double per_unit = clock_.seconds() / static_cast<double>(run_units_);
  const auto s = static_cast<int64_t>(per_unit * static_cast<double>(total_units_ - done_units_));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

void Progress::start_cell(int64_t index, const std::string& name) {
  cell_ = index;
  name_ = name;
}

void Progress::step(const std::string& what) {
  ++done_units_;
  ++run_units_;
  if (!enabled_ || !tty_) return;
  const int width = 24;
  const double frac = total_units_ ? static_cast<double>(done_units_) / static_cast<double>(total_units_) : 1.0;
  const int filled = static_cast<int>(frac * width);
  std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.');
  std::fprintf(stderr, "\r\033[K[%s] %3.0f%% cell %lld/%lld %s | %s | ETA %s", bar.c_str(), 100 * frac,
               static_cast<long long>(cell_ + 1), static_cast<long long>(n_cells_), name_.c_str(), what.c_str(),
               eta().c_str());
  std::fflush(stderr);
}

void Progress::finish_cell(const std::string& summary) {
  if (!enabled_) return;
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "[cell %lld/%lld] %s\n", static_cast<long long>(cell_ + 1),
               static_cast<long long>(n_cells_), summary.c_str());
  std::fflush(stderr);
}

void Progress::skip_cell(int64_t units) {
  done_units_ += units;
  total_units_ = std::max(total_units_, done_units_);
}

}  // namespace specdec::harness
