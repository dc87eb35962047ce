#include "harness/load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace specdec::harness {

namespace {

std::string read_small_file(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<CpuTicks> parse_proc_stat(const std::string& text) {
  std::istringstream lines(text);
  std::optional<CpuTicks> out;
  int n_cpus = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cpu", 0) != 0) continue;
    if (line.size() > 3 && line[3] >= '0' && line[3] <= '9') {
      ++n_cpus;
      continue;
    }
    std::istringstream cols(line.substr(3));
    CpuTicks t;
    if (!(cols >> t.user >> t.nice >> t.system >> t.idle >> t.iowait >> t.irq >> t.softirq >> t.steal)) return {};
    if (t.user < 0 || t.nice < 0 || t.system < 0 || t.idle < 0 || t.iowait < 0 || t.irq < 0 || t.softirq < 0 ||
        t.steal < 0)
      return {};
    out = t;
  }
  if (out) out->n_cpus = n_cpus;
  return out;
}

double parse_loadavg(const std::string& text) {
  std::istringstream in(text);
  double one = -1;
  if (!(in >> one) || one < 0) return -1;
  return one;
}

MemoryUsage read_memory_usage() {
  MemoryUsage m;
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) m.rss_bytes = resident_pages * sysconf(_SC_PAGESIZE);
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) m.peak_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;  // KiB on Linux
  // The kernel updates ru_maxrss lazily (it can trail statm by a few pages): the peak is at
  // least the current resident set.
  if (m.peak_rss_bytes >= 0) m.peak_rss_bytes = std::max(m.peak_rss_bytes, m.rss_bytes);
  return m;
}

LoadSnapshot read_load_snapshot() {
  LoadSnapshot s;
  s.t_s = steady_seconds();
  s.cpu = parse_proc_stat(read_small_file("/proc/stat"));
  s.loadavg_1m = parse_loadavg(read_small_file("/proc/loadavg"));
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {  // RUSAGE_SELF: every thread of the process
    s.own_cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    s.nivcsw = ru.ru_nivcsw;
  }
  return s;
}

LoadSample compare_snapshots(const LoadSnapshot& a, const LoadSnapshot& b, double ticks_per_s) {
  LoadSample out;
  out.wall_s = std::max(0.0, b.t_s - a.t_s);
  out.loadavg_start = a.loadavg_1m;
  out.loadavg_end = b.loadavg_1m;
  out.loadavg_max = std::max(a.loadavg_1m, b.loadavg_1m);  // -1 only when both are unknown
  if (a.nivcsw >= 0 && b.nivcsw >= a.nivcsw) {
    out.involuntary_switches = b.nivcsw - a.nivcsw;
    if (out.wall_s > 0) out.involuntary_switches_per_s = double(out.involuntary_switches) / out.wall_s;
  }
  if (a.own_cpu_s >= 0 && b.own_cpu_s >= a.own_cpu_s) out.own_cpu_s = b.own_cpu_s - a.own_cpu_s;
  if (!a.cpu || !b.cpu || ticks_per_s <= 0 || out.wall_s <= 0 || out.own_cpu_s < 0) return out;
  const int64_t busy = b.cpu->busy() - a.cpu->busy(), total = b.cpu->total() - a.cpu->total();
  const int64_t steal = b.cpu->steal - a.cpu->steal;
  if (busy < 0 || total <= 0 || steal < 0) return out;  // counters went backwards: not comparable
  // The tick counters and our own (exact) CPU time disagree by rounding and by tick sampling,
  // so a little own time can appear foreign or the reverse; clamp at 0.
  out.foreign_cpu_s = std::max(0.0, double(busy) / ticks_per_s - out.own_cpu_s);
  out.foreign_cores = out.foreign_cpu_s / out.wall_s;
  out.steal_fraction = double(steal) / double(total);
  out.n_cpus = std::max(1, b.cpu->n_cpus);
  // About two ticks per CPU of slack between two readings (rounding of each reading plus
  // sampling of whatever ran at a tick).
  out.resolution_cores = 2.0 * out.n_cpus / ticks_per_s / out.wall_s;
  return out;
}

LoadSample combine(const std::vector<LoadSample>& parts) {
  if (parts.empty()) return {};
  if (parts.size() == 1) return parts[0];
  LoadSample out;
  out.loadavg_start = parts.front().loadavg_start;
  out.loadavg_end = parts.back().loadavg_end;
  bool known = true, switches = true, own = true;
  double steal_weighted = 0, resolution_weighted = 0;
  out.involuntary_switches = 0, out.own_cpu_s = 0, out.foreign_cpu_s = 0;
  for (const auto& p : parts) {
    out.wall_s += p.wall_s;
    out.loadavg_max = std::max(out.loadavg_max, p.loadavg_max);
    switches = switches && p.involuntary_switches >= 0;
    own = own && p.own_cpu_s >= 0;
    known = known && p.known();
    out.involuntary_switches += p.involuntary_switches;
    out.own_cpu_s += p.own_cpu_s;
    out.foreign_cpu_s += p.foreign_cpu_s;
    steal_weighted += p.steal_fraction * p.wall_s;
    resolution_weighted += p.resolution_cores * p.wall_s;
    out.n_cpus = std::max(out.n_cpus, p.n_cpus);
  }
  if (!switches) out.involuntary_switches = -1;
  else if (out.wall_s > 0) out.involuntary_switches_per_s = double(out.involuntary_switches) / out.wall_s;
  if (!own) out.own_cpu_s = -1;
  if (!known || out.wall_s <= 0) {
    out.foreign_cpu_s = -1;
    return out;
  }
  out.foreign_cores = out.foreign_cpu_s / out.wall_s;
  out.steal_fraction = steal_weighted / out.wall_s;
  out.resolution_cores = resolution_weighted / out.wall_s;
  return out;
}

namespace {
// How far foreign_cores and steal_fraction are above (> 0) or below (< 0) their thresholds,
// with the resolution counted against the claim being made.
double foreign_excess(const LoadSample& l, double sign) {
  return l.foreign_cores - sign * l.resolution_cores - kContendedForeignCores;
}
double steal_excess(const LoadSample& l, double sign) {
  return l.steal_fraction - sign * l.resolution_cores / std::max(1, l.n_cpus) - kContendedStealFraction;
}
}  // namespace

bool LoadSample::contended() const {
  return known() && (foreign_excess(*this, +1) >= 0 || steal_excess(*this, +1) >= 0);
}

bool LoadSample::quiet() const {
  return known() && foreign_excess(*this, -1) < 0 && steal_excess(*this, -1) < 0;
}

const char* LoadSample::verdict() const {
  return contended() ? "contended" : quiet() ? "quiet" : "unknown";
}

std::string LoadSample::describe() const {
  if (!known()) return "unknown";
  char buf[128];
  if (!contended() && !quiet())
    std::snprintf(buf, sizeof buf, "too short to tell: %.3f s", wall_s);
  else if (steal_excess(*this, +1) >= 0 && foreign_excess(*this, +1) < 0)
    std::snprintf(buf, sizeof buf, "the hypervisor stole %.0f%% of the CPU time", 100.0 * steal_fraction);
  else
    std::snprintf(buf, sizeof buf, "other processes used %.2f cores", foreign_cores);
  return buf;
}

LoadSample LoadMonitor::stop() const {
  const long hz = ::sysconf(_SC_CLK_TCK);
  return compare_snapshots(start_, read_load_snapshot(), hz > 0 ? double(hz) : -1.0);
}

}  // namespace specdec::harness
