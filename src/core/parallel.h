#pragma once
// The engine's thread pool: every parallel loop of the model runs through parallel_for.
//
// Why not OpenMP (ATen's at::parallel_for): a decode step opens ~150-200 parallel regions, and
// an OpenMP region splits its range statically, one piece per thread, then waits at a barrier
// for the slowest thread. On a machine where another process shares the cores, one of our
// threads is often descheduled for a whole time slice (milliseconds), and every region waits
// for it: one busy neighbour made SmolLM2's speculative decoding ~50x slower (issue 10).
//
// Here a loop is cut into many small chunks that threads claim one at a time from a shared
// counter, and the calling thread claims chunks too. A thread that is not running simply claims
// nothing: the others finish its share, and the caller waits only for chunks already being
// worked on. Idle workers spin for a short while (the next region of the same step usually
// starts within microseconds) and then sleep on a condition variable, so an idle engine costs
// no CPU. Workers ask the kernel for short time slices (100 us; SPECDEC_WORKER_SLICE_US, 0 =
// the kernel's): on Linux 6.12+ a woken worker then takes its core from a busy neighbour at once
// instead of after the neighbour's slice, by which time the caller had run the loop alone.
//
// ATen, OpenBLAS and oneDNN are kept single-threaded (set_num_threads sets their OpenMP thread
// count to 1 in every thread of the pool), so no second set of spinning threads competes with
// this one.
#include <chrono>
#include <cstdint>

namespace specdec::parallel {

// How parallel_for runs a loop. kPool is the default; kOpenMP reproduces the previous
// engine's behaviour (one static piece per thread in an OpenMP region, as at::parallel_for)
// for A/B measurements (experiments/micro/bench_model_contention.cpp).
// kOpenMP needs a compiler that compiled the OpenMP region (openmp_available(): GCC here; the
// ASan stage's clang build links GCC's OpenMP runtime without compiling regions, docs/ci.md):
// set_backend(kOpenMP) throws specdec::Error elsewhere.
enum class Backend { kPool, kOpenMP };
bool openmp_available();
void set_backend(Backend b);
Backend backend();
const char* backend_name(Backend b);

// Threads used by parallel_for, the calling thread included (>= 1). More threads than the
// hardware runs at once only slow a memory-bound engine down and, in the extreme, exhaust
// the process (--threads 100000): they are refused unless allow_oversubscribe is set.
// Throws specdec::Error naming the value and the limit.
void set_num_threads(int n, bool allow_oversubscribe = false);
int num_threads();
int hardware_threads();

// How long (microseconds) an idle worker, or a caller waiting for the last chunks, spins
// before it sleeps. Default 50 us; SPECDEC_SPIN_US overrides it at start-up.
void set_spin_us(int us);
int spin_us();

namespace detail {
// Step's choice for one kind of step (0: the pool, 1: the calling thread alone). It runs the
// preferred mode and, now and then, a trial of the other: kTrial steps in a row. The other mode
// takes over when the mean of its times held (its last trial) is 5 % lower than the mean of the
// preferred mode's last five, checked after every step (a margin against flipping on noise;
// means, not medians: under contention the pool's cost is in its rare long stalls). A trial has
// several steps, not one: beside a busy process a pool step without a stall takes about as long
// as one alone, and a single lucky pool step won the pool back until its next stalls. A kind's
// first kTrial steps run on the pool, the next kTrial alone. Trials come 8 steps after a flip,
// else at a spacing that keeps their cost near 1 % of the time (8 .. 128 steps): a quiet machine
// pays little for them, and a change of load is seen within a few steps where the two modes are
// close, within 128 where they are far apart. A starved pool step (the other threads ran under
// a quarter of their fair share of its chunks) counts as lost whatever its time: beside a busy
// process the workers rarely get a core, the pool is at best the thread alone plus its stalls,
// and a pool trial without a stall would otherwise win the pool back (docs/busy_machine.md).
// The chooser also watches for free cores: when `cores_wanted()`, Step tells it at the end of a
// step whether the machine has a core free for every worker (`cores_free`), and it uses that in
// two places:
// - after a starved loss the next trial is far (up to 128 steps): kFreeSeen steps with free cores
//   in a row bring the pool's trial forward to the next step. A trial the signal brought that is
//   starved again (a neighbour that the signal does not see, e.g. another guest of the
//   hypervisor) doubles the steps the signal must hold next time, up to 64; a pool that wins
//   resets it;
// - a trial of the thread alone that falls due while the pool's last kTrial steps kept pace
//   (their other threads ran at least half their fair share of the chunks) waits kQuietSpacing
//   steps where the cores are free: on a quiet machine such trials cost 5-7 % of a 48-token
//   generation (docs/busy_machine.md) and found nothing.
class ModeChooser {
 public:
  int pick();  // the mode for the next step
  // How long it took; starved: a pool step whose workers ran under a quarter of their share;
  // kept_pace: one whose workers ran at least half of it.
  void record(int mode, double ms, bool starved = false, bool kept_pace = false);
  double mean(int mode) const;  // of the times held (0 before any)
  // Whether the next pick() wants to know if the machine has a core free for every worker:
  // waiting out a starved loss, or a trial alone due while the pool keeps pace.
  bool cores_wanted() const { return waiting_out_starved() || quiet_trial_due(); }
  void cores_free(bool free);  // when cores_wanted(), before the next pick()

 private:
  bool waiting_out_starved() const { return waiting_out_starved_ && trial_left_ == 0; }
  bool quiet_trial_due() const { return preferred_ == 0 && trial_left_ == 0 && until_trial_ <= 0 && paced_ >= kTrial; }

  static constexpr int kHeld = 5;      // times held per mode
  static constexpr int kTrial = 3;     // steps of a trial
  static constexpr int kFreeSeen = 2;  // steps with free cores in a row that bring a trial
  static constexpr int kQuietSpacing = 32;  // steps a quiet machine puts a trial alone off
  double ms_[2][kHeld] = {};
  int n_[2] = {0, 0}, next_[2] = {0, 0};
  int preferred_ = 0, until_trial_ = kTrial, trial_left_ = 0;
  bool trial_starved_ = false;       // a step of the running pool trial was starved
  bool waiting_out_starved_ = false;  // alone after a pool trial lost to starvation
  bool signalled_trial_ = false;      // the running trial came from the free-cores signal
  int free_seen_ = 0, free_needed_ = kFreeSeen;
  int paced_ = 0;  // pool steps in a row that kept pace
};
}  // namespace detail

// How many Steps (of every thread, since the start) ran their loops on the pool and on the
// calling thread alone, and how often a chooser changed its preferred mode: `generate --json`
// reports them for the generation ("parallel"), to explain a speed figure. For a closer look,
// SPECDEC_STEP_TRACE=1 prints a line per Step to stderr: "step CHOOSER MODE WALL_MS
// THREAD_CPU_MS CORE CHUNKS MINE WAIT_MS" (the calling thread's CPU time, the core it ended on,
// the chunks of the loops it ran on the pool, how many of them it ran itself, and its time
// waiting for the others' chunks).
struct StepCounts {
  int64_t pool = 0, alone = 0, flips = 0;
  int64_t starved = 0;  // pool steps whose workers ran under a quarter of their share of the chunks
};
StepCounts step_counts();

// One step of a recurring kind (a model's forward over N rows): its parallel loops run either
// on the pool or on the calling thread alone, whichever was faster the last times this kind of
// step ran, with the other tried now and then. On a quiet machine the pool wins and stays;
// beside a busy process two threads can lose to one (a descheduled thread holds up every loop
// it has a chunk of, and a memory-bound step gains little from the second core), and then the
// step runs alone until the pool wins again. Results do not depend on the mode (parallel_for's
// chunks are the same either way). The loops that follow a Step outside any Step (sampling,
// verification) run as it did, until the next Step. `who` and `kind` name the kind (e.g. the
// model and N); a Step inside another Step, or with one thread, changes nothing. Per calling
// thread.
class Step {
 public:
  Step(const void* who, int64_t kind);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

 private:
  detail::ModeChooser* chooser_ = nullptr;
  int mode_ = 0;
  std::chrono::steady_clock::time_point t0_;
  double cpu0_ = 0;
  int64_t chunks0_ = 0, mine0_ = 0;
  double wait0_ = 0;
};

namespace detail {
using ChunkFn = void (*)(const void* ctx, int64_t begin, int64_t end);
void run(int64_t n, int64_t grain, ChunkFn fn, const void* ctx);
}  // namespace detail

// Calls f(begin, end) on disjoint ranges that together cover [0, n), each of at most `grain`
// items (grain >= 1; larger ranges when n / grain would exceed the chunk limit). Runs inline
// when there is one thread, one chunk, or when called from inside another parallel_for.
// Returns when every call has returned; the first exception thrown by f is rethrown here.
// f must not depend on which thread runs which range.
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  detail::run(
      n, grain,
      [](const void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      &f);
}

}  // namespace specdec::parallel
