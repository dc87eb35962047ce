#pragma once
// How busy the machine was while a cell was measured. A speed figure taken while other
// processes used the CPU is not to be trusted (DESIGN: "a figure is only as good as the
// machine was quiet"): one comparison of two engines taken beside other jobs ranked them the
// opposite way from a quiet rerun. LoadMonitor brackets a measurement and returns a
// LoadSample; the runner stores it with the cell and the report flags contended cells.
//
// Everything here degrades to "unknown" (fields -1) when /proc is unreadable; it never throws.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace specdec::harness {

// A cell is contended when, during its measurement, other processes used at least this many
// cores on average (foreign_cores), or the hypervisor gave at least this fraction of the CPU
// time to other guests (steal). Both are judged against the tick resolution of /proc/stat
// (LoadSample::resolution_cores): contended only when the excess is beyond it, quiet only when
// even the resolution added stays below; an interval too short for either is "unknown".
inline constexpr double kContendedForeignCores = 0.25;
inline constexpr double kContendedStealFraction = 0.05;

// The aggregate "cpu" line of /proc/stat, in clock ticks (USER_HZ).
struct CpuTicks {
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  int n_cpus = 0;  // number of "cpuN" lines
  // Time something ran on this machine's CPUs: processes (user, nice, system) and interrupt
  // handling (irq, softirq). Not idle or iowait (nothing ran), not steal (another guest of the
  // hypervisor ran; reported apart), not guest/guest_nice (already inside user/nice).
  int64_t busy() const { return user + nice + system + irq + softirq; }
  int64_t total() const { return busy() + idle + iowait + steal; }
};

// Parses /proc/stat text; nullopt when the "cpu" line is missing or malformed (fewer than
// the 8 columns up to steal, which every kernel since 2.6.11 prints).
std::optional<CpuTicks> parse_proc_stat(const std::string& text);
// The 1-minute load average from /proc/loadavg text; -1 when malformed.
double parse_loadavg(const std::string& text);

// One reading of the counters; unreadable parts are nullopt / -1.
struct LoadSnapshot {
  double t_s = 0;               // steady clock, seconds
  std::optional<CpuTicks> cpu;  // /proc/stat
  double loadavg_1m = -1;       // /proc/loadavg
  double own_cpu_s = -1;        // this process, all threads: user + system (getrusage)
  int64_t nivcsw = -1;          // this process's involuntary context switches (getrusage)
};
LoadSnapshot read_load_snapshot();

// This process's memory: its resident set now (/proc/self/statm) and the peak so far
// (getrusage ru_maxrss). -1 when unreadable.
struct MemoryUsage {
  int64_t rss_bytes = -1;
  int64_t peak_rss_bytes = -1;
};
MemoryUsage read_memory_usage();

// The machine's load over one interval. -1 = unknown.
struct LoadSample {
  double wall_s = 0;
  double loadavg_start = -1, loadavg_end = -1, loadavg_max = -1;  // 1-minute load average
  int64_t involuntary_switches = -1;        // ours: a runnable thread of ours was preempted
  double involuntary_switches_per_s = -1;
  double own_cpu_s = -1;                    // CPU seconds this process used
  double foreign_cpu_s = -1;                // CPU seconds everything else used (>= 0)
  double foreign_cores = -1;                // foreign_cpu_s / wall_s
  double steal_fraction = -1;               // steal ticks / all ticks
  double resolution_cores = -1;             // granularity of foreign_cores over this interval
  int n_cpus = -1;

  bool known() const { return foreign_cores >= 0 && steal_fraction >= 0; }  // /proc was readable
  bool contended() const;
  bool quiet() const;
  const char* verdict() const;  // "contended" | "quiet" | "unknown" (unreadable, or too short to tell)
  // For reports: "other processes used 0.90 cores", "the hypervisor stole 7% of the CPU time",
  // "too short to tell: 0.010 s", "unknown".
  std::string describe() const;
};

// The interval between two snapshots; ticks_per_s is sysconf(_SC_CLK_TCK).
LoadSample compare_snapshots(const LoadSnapshot& start, const LoadSnapshot& end, double ticks_per_s);

// Several intervals as one (e.g. the questions of an interleave: prompt run): times, CPU
// seconds and switches add up, rates are recomputed over the summed wall time, the tick
// resolution adds up per interval. Unknown when any part is unknown.
LoadSample combine(const std::vector<LoadSample>& parts);

// Brackets one measurement: start(), run it, stop().
class LoadMonitor {
 public:
  void start() { start_ = read_load_snapshot(); }
  LoadSample stop() const;

 private:
  LoadSnapshot start_;
};

}  // namespace specdec::harness
