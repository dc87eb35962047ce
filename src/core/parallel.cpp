// The thread pool behind parallel_for (see parallel.h for why it exists).
//
// Protocol. One job at a time. The caller writes the job's fields (function, context, range,
// chunk size), then publishes `state_`, a 64-bit word holding the job's generation, its number
// of chunks and how many have been claimed from each end of the range. Every thread claims a
// chunk with one compare-and-swap on that word: success proves that the job it read the fields
// of is still live, because a job's fields are only rewritten after all of its chunks have been
// claimed and finished. The caller claims from the front and the workers from the back, so with
// two threads each streams one contiguous part of the weights, as a static split would, and the
// two parts meet wherever the threads' speeds put the boundary. (Claiming in turn from one end
// left SmolLM2's decode at 2 threads ~20 % slower on a Zen 5 EPYC: docs/busy_machine.md.) Each
// finished chunk increments `done_`; the caller returns when done_ equals the chunk count, so it
// waits for chunks in progress, never for a thread that has not started.
#include "core/parallel.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"

#ifdef _OPENMP
#include <omp.h>
#else
// A compiler that generates no OpenMP code (the ASan stage's clang, scripts/build.sh) still links
// GCC's OpenMP runtime, the one LibTorch and OpenBLAS use; this file sets its thread count.
extern "C" void omp_set_num_threads(int);
#endif

#if defined(__x86_64__) || defined(__i386__)
#define SD_CPU_RELAX() __builtin_ia32_pause()  // _mm_pause without <immintrin.h>
#elif defined(__aarch64__)
#define SD_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define SD_CPU_RELAX() ((void)0)
#endif

namespace specdec::parallel {
namespace {

using detail::ChunkFn;

// state_ = [generation : 28 | n_chunks : 12 | claimed from the front : 12 | from the back : 12].
// The chunk count rides in the word, not in a field beside it: a thread that read a finished
// job's word and the next job's count could otherwise claim a chunk before that job is
// published.
constexpr int kIdxBits = 12;
constexpr uint64_t kIdxMask = (uint64_t{1} << kIdxBits) - 1;
constexpr int64_t kMaxChunks = static_cast<int64_t>(kIdxMask);
constexpr int kMaxThreads = 1024;  // even with oversubscription allowed

uint64_t pack(uint64_t gen, uint64_t n_chunks) { return (gen << (3 * kIdxBits)) | (n_chunks << (2 * kIdxBits)); }
uint64_t gen_of(uint64_t s) { return s >> (3 * kIdxBits); }
uint64_t chunks_of(uint64_t s) { return (s >> (2 * kIdxBits)) & kIdxMask; }
uint64_t front_of(uint64_t s) { return (s >> kIdxBits) & kIdxMask; }
uint64_t back_of(uint64_t s) { return s & kIdxMask; }

// A number of microseconds from the environment (read once, at start-up): `fallback` when the
// variable is unset, and also, with a warning naming it, when it is not a whole number in
// 0 .. 10^7.
int env_microseconds(const char* name, int fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  if (*end == 0 && v >= 0 && v <= 10'000'000) return static_cast<int>(v);
  log::warn(name, "=", e, " is not a number of microseconds from 0 to 10000000: using ", fallback);
  return fallback;
}

std::atomic<int> g_spin_us{env_microseconds("SPECDEC_SPIN_US", 50)};
// The slice the workers ask for (request_slice; 0 = the kernel's).
const int g_worker_slice_us = env_microseconds("SPECDEC_WORKER_SLICE_US", 100);
std::atomic<Backend> g_backend{Backend::kPool};
std::atomic<int64_t> g_steps[2] = {0, 0}, g_flips{0}, g_starved{0};
const bool g_step_trace = [] {
  const char* e = std::getenv("SPECDEC_STEP_TRACE");
  return e && *e && *e != '0';
}();
thread_local bool t_in_region = false;  // inside a chunk (or a worker): nested loops run inline
thread_local bool t_solo = false;       // the last Step on this thread ran its loops alone

// What the loops this thread published on the pool came to: their chunks, the ones it ran
// itself, and its time waiting for the others' chunks after it found none left to claim.
struct CallerTally {
  int64_t chunks = 0, mine = 0;
  double wait_ms = 0;
};
thread_local CallerTally t_tally;

// Spins until pred() holds or the spin budget is spent; returns pred(). After a few pauses it
// yields the core at each turn: on a machine with more runnable threads than cores, the thread
// this one waits for may be queued on this very core (our other thread, or a neighbour's), and
// a pause-only spin would burn the time slice that thread needs. On an idle core sched_yield
// returns at once.
template <class Pred>
bool spin_until(const Pred& pred) {
  using clock = std::chrono::steady_clock;
  const auto limit = std::chrono::microseconds(g_spin_us.load(std::memory_order_relaxed));
  const auto t0 = clock::now();
  for (int i = 1;; ++i) {
    if (pred()) return true;
    if (i > 64) sched_yield();
    else SD_CPU_RELAX();
    if ((i & 63) == 0 && clock::now() - t0 >= limit) return pred();
  }
}

// The scheduler's view of a thread, as sched_setattr(2) takes it (glibc has no wrapper).
struct SchedAttr {
  uint32_t size = sizeof(SchedAttr), policy = 0;
  uint64_t flags = 0;
  int32_t nice = 0;
  uint32_t priority = 0;
  uint64_t runtime = 0, deadline = 0, period = 0;  // runtime: the slice a normal thread asks for
  uint32_t util_min = 0, util_max = 0;
};

// Asks the kernel to run this thread in slices of `us` microseconds (0: leave its default).
// Linux's EEVDF scheduler (6.12 and later) lets a waking thread with a shorter slice than the
// running one take the core at once, instead of waiting for that one's slice (~3 ms) to end. A
// worker is woken for each loop, and a loop of a decode step lasts ~0.1 ms: beside a busy
// process the worker came too late for every loop and the caller ran ~97 % of the chunks itself
// (docs/busy_machine.md). Only a thread of the normal policy is touched, its nice level kept;
// older kernels ignore the field, and a refusal changes nothing.
void request_slice(int us) {
  SchedAttr a;
  if (us <= 0 || syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0 || a.policy != SCHED_OTHER) return;
  a.size = sizeof a;
  a.flags = 0;
  a.runtime = static_cast<uint64_t>(us) * 1000;
  syscall(SYS_sched_setattr, 0, &a, 0);
}

class Pool {
 public:
  ~Pool() { stop_workers(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Workers not asleep (spinning between loops, or running chunks).
  int awake() const { return static_cast<int>(workers_.size()) - sleepers_.load(std::memory_order_relaxed); }

  void resize(int n) {
    std::lock_guard<std::mutex> run_lock(run_mu_);
    if (n == size()) return;
    stop_workers();
    stop_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_main(); });
  }

  // False when another thread is running a job: the caller then runs the loop itself.
  bool run(int64_t n, int64_t chunk, int64_t n_chunks, ChunkFn fn, const void* ctx) {
    std::unique_lock<std::mutex> run_lock(run_mu_, std::try_to_lock);
    if (!run_lock.owns_lock()) return false;
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    chunk_.store(chunk, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    state_.store(pack(++gen_, static_cast<uint64_t>(n_chunks)), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mu_); }
      wake_cv_.notify_all();
    }
    t_in_region = true;
    t_tally.mine += work(/*from_back=*/false);
    t_tally.chunks += n_chunks;
    t_in_region = false;
    const auto finished = [&] { return done_.load(std::memory_order_seq_cst) == n_chunks; };
    if (!finished()) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!spin_until(finished)) {
        std::unique_lock<std::mutex> lock(mu_);
        caller_sleeping_.store(true, std::memory_order_seq_cst);
        done_cv_.wait(lock, finished);
        caller_sleeping_.store(false, std::memory_order_relaxed);
      }
      t_tally.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Claims and runs chunks of the current job, from its front (the caller) or its back (the
  // workers), until none is left; returns how many it ran.
  int64_t work(bool from_back) {
    for (int64_t ran = 0;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      const int64_t n_chunks = static_cast<int64_t>(chunks_of(s));
      const int64_t front = static_cast<int64_t>(front_of(s)), back = static_cast<int64_t>(back_of(s));
      if (front + back >= n_chunks) return ran;
      const ChunkFn fn = fn_.load(std::memory_order_relaxed);
      const void* ctx = ctx_.load(std::memory_order_relaxed);
      const int64_t n = n_.load(std::memory_order_relaxed), chunk = chunk_.load(std::memory_order_relaxed);
      const uint64_t claimed = s + (from_back ? uint64_t{1} : uint64_t{1} << kIdxBits);
      if (!state_.compare_exchange_weak(s, claimed, std::memory_order_acq_rel, std::memory_order_acquire))
        continue;  // another thread took it, or a new job started: read again
      ++ran;
      const int64_t begin = (from_back ? n_chunks - 1 - back : front) * chunk;
      try {
        fn(ctx, begin, std::min(n, begin + chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == n_chunks &&
          caller_sleeping_.load(std::memory_order_seq_cst)) {
        { std::lock_guard<std::mutex> lock(mu_); }
        done_cv_.notify_all();
      }
    }
  }

  void worker_main() {
    omp_set_num_threads(1);  // library calls made from a chunk stay single-threaded
    request_slice(g_worker_slice_us);
    t_in_region = true;
    uint64_t seen = gen_of(state_.load(std::memory_order_acquire));
    const auto woken = [&] { return stop_.load() || gen_of(state_.load(std::memory_order_seq_cst)) != seen; };
    for (;;) {
      if (!spin_until(woken)) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_cv_.wait(lock, woken);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop_.load()) return;
      seen = gen_of(state_.load(std::memory_order_acquire));
      work(/*from_back=*/true);
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;      // sleeping and waking, and error_
  std::condition_variable wake_cv_, done_cv_;
  // The claim word and the completion counter on cache lines of their own: every chunk
  // touches both, and the job's fields beside them are read-mostly.
  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<int64_t> done_{0};
  alignas(64) std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0}, chunk_{1};
  uint64_t gen_ = 0;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false}, stop_{false};
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

#ifdef _OPENMP
// The previous engine's scheme: an OpenMP region, one static piece per thread (its chunks
// run in order), and a barrier at the end.
void run_openmp(int64_t n, int64_t chunk, int64_t n_chunks, ChunkFn fn, const void* ctx) {
  const int n_threads = static_cast<int>(std::min<int64_t>(num_threads(), n_chunks));
  const int64_t piece = (n_chunks + n_threads - 1) / n_threads * chunk;
  std::exception_ptr error;
  std::mutex mu;
#pragma omp parallel num_threads(n_threads)
  {
    const int64_t begin = omp_get_thread_num() * piece, end = std::min(n, begin + piece);
    t_in_region = true;
    try {
      for (int64_t b = begin; b < end; b += chunk) fn(ctx, b, std::min(end, b + chunk));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
    t_in_region = false;
  }
  if (error) std::rethrow_exception(error);
}
#endif

}  // namespace

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_num_threads(int n, bool allow_oversubscribe) {
  const int hw = hardware_threads();
  SD_CHECK(n >= 1, "threads must be >= 1, got ", n);
  SD_CHECK(n <= hw || allow_oversubscribe, "threads = ", n, " exceeds the ", hw,
           " hardware threads this process may use (allow it with --threads-oversubscribe)");
  SD_CHECK(n <= kMaxThreads, "threads = ", n, " exceeds the limit of ", kMaxThreads, " threads");
  pool().resize(n);
  omp_set_num_threads(1);
}

int num_threads() { return pool().size(); }

#ifdef _OPENMP
bool openmp_available() { return true; }
#else
bool openmp_available() { return false; }
#endif
void set_backend(Backend b) {
  SD_CHECK(b != Backend::kOpenMP || openmp_available(),
           "the OpenMP backend is not in this build: its compiler ran without OpenMP code generation");
  g_backend = b;
}
Backend backend() { return g_backend; }
const char* backend_name(Backend b) { return b == Backend::kPool ? "pool" : "openmp"; }

void set_spin_us(int us) {
  SD_CHECK(us >= 0, "spin time must be >= 0 microseconds, got ", us);
  g_spin_us = us;
}
int spin_us() { return g_spin_us; }

namespace detail {

void run(int64_t n, int64_t grain, ChunkFn fn, const void* ctx) {
  if (n <= 0) return;
  int64_t chunk = std::max<int64_t>(1, grain);
  int64_t n_chunks = (n + chunk - 1) / chunk;
  if (n_chunks > kMaxChunks) {
    chunk = (n + kMaxChunks - 1) / kMaxChunks;
    n_chunks = (n + chunk - 1) / chunk;
  }
  if (n_chunks > 1 && num_threads() > 1 && !t_in_region && !t_solo) {
#ifdef _OPENMP
    if (g_backend == Backend::kOpenMP) return run_openmp(n, chunk, n_chunks, fn, ctx);
#endif
    if (pool().run(n, chunk, n_chunks, fn, ctx)) return;
  }
  for (int64_t b = 0; b < n; b += chunk) fn(ctx, b, std::min(n, b + chunk));
}

}  // namespace detail

namespace detail {

int ModeChooser::pick() {
  if (trial_left_ == 0 && until_trial_-- <= 0) {  // time for a trial of the other mode
    trial_left_ = kTrial;
    trial_starved_ = false;
    n_[1 - preferred_] = next_[1 - preferred_] = 0;  // its older times are of another load
  }
  return trial_left_ > 0 ? 1 - preferred_ : preferred_;
}

void ModeChooser::cores_free(bool free) {
  if (quiet_trial_due()) {  // the pool keeps pace: a trial alone only beside another process
    if (free) until_trial_ = kQuietSpacing;
    return;
  }
  if (!waiting_out_starved()) return;
  free_seen_ = free ? free_seen_ + 1 : 0;
  if (free_seen_ < free_needed_) return;
  free_seen_ = 0;
  until_trial_ = 0;  // the next pick() starts a trial of the pool
  signalled_trial_ = true;
}

void ModeChooser::record(int mode, double ms, bool starved, bool kept_pace) {
  if (mode == 0) paced_ = kept_pace ? paced_ + 1 : 0;
  // A starved pool step holds an infinite time: the pool loses every comparison until its next
  // trial's steps replace it (a trial clears the mode's older times).
  ms_[mode][next_[mode]] = mode == 0 && starved ? std::numeric_limits<double>::infinity() : ms;
  next_[mode] = (next_[mode] + 1) % kHeld;
  n_[mode] = std::min(n_[mode] + 1, kHeld);
  const bool trial = mode != preferred_;
  trial_starved_ = trial_starved_ || (trial && mode == 0 && starved);
  if (trial && --trial_left_ > 0) return;  // the trial goes on
  const int other = 1 - preferred_;
  if (n_[other] == 0) return;  // the first steps: nothing to compare with yet
  // The other mode takes over when 5 % faster: a margin, so that noise does not flip the choice
  // back and forth. Compared after each step, so that stalls that slow the preferred mode down
  // hand over to the other at once (by the times of its last trial).
  const bool flip = mean(other) < 0.95 * mean(preferred_);
  if (flip) {
    preferred_ = other;
    g_flips.fetch_add(1, std::memory_order_relaxed);
  }
  if (!flip && !trial) return;
  // The free-cores signal: watched while alone after a starved pool trial; it must hold longer
  // after each trial it brought that was starved again, and is reset by a pool that wins.
  if (preferred_ == 0) free_needed_ = kFreeSeen;
  else if (trial && trial_starved_ && signalled_trial_) free_needed_ = std::min(2 * free_needed_, 64);
  waiting_out_starved_ = preferred_ == 1 && trial_starved_;
  signalled_trial_ = false;
  free_seen_ = 0;
  // After a flip (the load changed) the other is tried again in 8 steps; after a lost trial, at
  // a spacing that keeps trials near 1 % of the time: 100 steps per unit of the trial's excess
  // per step of the trial, 8 .. 128.
  const double excess = mean(1 - preferred_) / std::max(mean(preferred_), 1e-9) - 1;
  until_trial_ = flip ? 8 : static_cast<int>(std::clamp(100.0 * kTrial * excess, 8.0, 128.0));
}

double ModeChooser::mean(int mode) const {
  double sum = 0;
  for (int i = 0; i < n_[mode]; ++i) sum += ms_[mode][i];
  return n_[mode] ? sum / n_[mode] : 0;
}

}  // namespace detail

namespace {
thread_local std::deque<std::pair<std::pair<const void*, int64_t>, detail::ModeChooser>> t_steps;  // stable addresses
thread_local bool t_in_step = false;

// CPUs no thread wants now: the online CPUs less the machine's runnable threads (the 4th field
// of /proc/loadavg, "runnable/total", which counts the caller), plus `ours` of them that are
// this process's own. Both are the whole machine's, also inside a container. -1 when
// unreadable. About 10 us; read only when a chooser wants it (ModeChooser::cores_wanted).
int idle_cpus(int ours) {
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t got = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (got <= 0) return -1;
  buf[got] = 0;
  int runnable = 0;
  if (std::sscanf(buf, "%*f %*f %*f %d/", &runnable) != 1 || runnable < 1) return -1;
  static const int online = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  return online - runnable + ours;
}

detail::ModeChooser& chooser_of(const void* who, int64_t kind) {
  for (auto& [key, c] : t_steps)
    if (key.first == who && key.second == kind) return c;
  t_steps.push_back({{who, kind}, detail::ModeChooser()});
  return t_steps.back().second;
}
}  // namespace

StepCounts step_counts() {
  return {g_steps[0].load(), g_steps[1].load(), g_flips.load(), g_starved.load()};
}

Step::Step(const void* who, int64_t kind) {
  if (t_in_region || t_in_step) return;  // inside a chunk or another Step: that one decides
  t_solo = false;                        // a Step that does not choose leaves the pool as usual
  if (num_threads() == 1 || g_backend != Backend::kPool) return;
  chooser_ = &chooser_of(who, kind);
  mode_ = chooser_->pick();
  t_in_step = true;
  t_solo = mode_ == 1;
  t0_ = std::chrono::steady_clock::now();
  chunks0_ = t_tally.chunks;
  mine0_ = t_tally.mine;
  wait0_ = t_tally.wait_ms;
  if (g_step_trace) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    cpu0_ = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
}

Step::~Step() {
  if (!chooser_) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  // Starved: enough chunks to tell (4 a thread), and the other threads ran under a quarter of
  // their fair share, (T - 1) / T, of them.
  const int64_t chunks = t_tally.chunks - chunks0_, theirs = chunks - (t_tally.mine - mine0_), T = num_threads();
  const bool starved = mode_ == 0 && chunks >= 4 * T && 4 * T * theirs < chunks * (T - 1);
  const bool kept_pace = mode_ == 0 && chunks >= 4 * T && 2 * T * theirs >= chunks * (T - 1);
  chooser_->record(mode_, ms, starved, kept_pace);
  // Free cores for the next pick(), read at the step's end: at the next one's start a process
  // that reads our output (woken by the token just written) would look like a neighbour. Our
  // workers still spinning are runnable too, and are not one.
  if (chooser_->cores_wanted()) chooser_->cores_free(idle_cpus(pool().awake()) >= T - 1);
  g_steps[mode_].fetch_add(1, std::memory_order_relaxed);
  if (starved) g_starved.fetch_add(1, std::memory_order_relaxed);
  if (g_step_trace) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    const double cpu = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    std::fprintf(stderr, "step %p %d %.3f %.3f %d %lld %lld %.3f\n", static_cast<const void*>(chooser_), mode_, ms,
                 cpu - cpu0_, sched_getcpu(), static_cast<long long>(t_tally.chunks - chunks0_),
                 static_cast<long long>(t_tally.mine - mine0_), t_tally.wait_ms - wait0_);
  }
  t_in_step = false;  // t_solo stays: the loops between forwards follow the last one's choice
}

}  // namespace specdec::parallel
