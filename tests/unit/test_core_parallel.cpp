// The thread pool (core/parallel.h): every index exactly once, for any range, grain, thread
// count and backend; exceptions reach the caller; nested and concurrent calls; thread-count
// limits.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

namespace sp = specdec::parallel;

namespace {

// Runs parallel_for over [0, n) and returns how often each index was visited.
std::vector<int> visits(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> count(static_cast<size_t>(n));
  for (auto& c : count) c = 0;
  sp::parallel_for(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(e - b, std::max<int64_t>(grain, 1));
    for (int64_t i = b; i < e; ++i) ++count[static_cast<size_t>(i)];
  });
  std::vector<int> out;
  for (auto& c : count) out.push_back(c.load());
  return out;
}

// The backends this build has: the OpenMP one only where its compiler generated OpenMP code
// (not in the ASan stage's clang build, where choosing it is a named error, checked below).
std::vector<sp::Backend> backends() {
  if (sp::openmp_available()) return {sp::Backend::kPool, sp::Backend::kOpenMP};
  return {sp::Backend::kPool};
}

struct Restore {
  ~Restore() {
    sp::set_backend(sp::Backend::kPool);
    sp::set_num_threads(std::min(2, sp::hardware_threads()));
  }
};

}  // namespace

TEST(Parallel, EveryIndexExactlyOnceForEveryThreadCountAndBackend) {
  Restore restore;
  for (sp::Backend be : backends()) {
    sp::set_backend(be);
    for (int threads : {1, 2, 3, 8}) {
      sp::set_num_threads(threads, /*allow_oversubscribe=*/true);
      EXPECT_EQ(sp::num_threads(), threads);
      for (int64_t n : {0, 1, 2, 7, 64, 1000, 4001})  // up to the chunk limit (2^12 - 1)
        for (int64_t grain : {1, 3, 64, 5000}) {
          const std::vector<int> v = visits(n, grain);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(v[static_cast<size_t>(i)], 1)
                << sp::backend_name(be) << " threads " << threads << " n " << n << " grain " << grain << " index " << i;
        }
    }
  }
}

// Many tiny back-to-back jobs: the claim/complete protocol must never lose or repeat a chunk
// when a worker arrives late at one job while the next one is already published.
TEST(Parallel, ManySmallJobsInARow) {
  Restore restore;
  sp::set_num_threads(4, true);
  int64_t total = 0;
  for (int job = 0; job < 20000; ++job) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 1 + job % 17;
    sp::parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
    total += sum;
  }
  EXPECT_GT(total, 0);
}

// The caller claims chunks from the front of the range and the workers from the back, so with
// two threads each runs one contiguous part (a static split's streaming, with the boundary where
// the threads' speeds put it). Claiming in turn from one end fails this as soon as the worker
// takes part.
TEST(Parallel, WithTwoThreadsTheCallerRunsAPrefixAndTheWorkerTheRest) {
  Restore restore;
  sp::set_num_threads(2, true);
  const std::thread::id caller = std::this_thread::get_id();
  int joined = 0;
  for (int attempt = 0; attempt < 20 && joined < 3; ++attempt) {
    constexpr int64_t n = 256;
    std::vector<std::atomic<int>> by_caller(n);
    for (auto& b : by_caller) b = -1;
    sp::parallel_for(n, 1, [&](int64_t b, int64_t e) {
      volatile double x = 0;
      for (int i = 0; i < 20000; ++i) x = x + i;  // ~10 ms a job: the worker joins in, even on a busy machine
      for (int64_t i = b; i < e; ++i) by_caller[static_cast<size_t>(i)] = std::this_thread::get_id() == caller;
    });
    int64_t prefix = 0;
    while (prefix < n && by_caller[static_cast<size_t>(prefix)] == 1) ++prefix;
    for (int64_t i = prefix; i < n; ++i)
      ASSERT_EQ(by_caller[static_cast<size_t>(i)], 0) << "index " << i << " after the caller's prefix of " << prefix;
    joined += prefix < n;
  }
  EXPECT_GT(joined, 0) << "the worker never took a chunk in 20 jobs of 256";
}

TEST(Parallel, HugeRangesAreCutIntoAtMostTheChunkLimit) {
  Restore restore;
  sp::set_num_threads(2, true);
  std::atomic<int64_t> calls{0}, covered{0};
  const int64_t n = int64_t{1} << 24;  // more than the 2^12 - 1 chunks a job can hold
  sp::parallel_for(n, 1, [&](int64_t b, int64_t e) {
    ++calls;
    covered += e - b;
  });
  EXPECT_EQ(covered.load(), n);
  EXPECT_LT(calls.load(), int64_t{1} << 12);
}

TEST(Parallel, FirstExceptionReachesTheCallerAfterEveryChunkFinished) {
  Restore restore;
  for (sp::Backend be : backends()) {
    sp::set_backend(be);
    sp::set_num_threads(2, true);
    std::atomic<int> finished{0};
    EXPECT_THROW(sp::parallel_for(100, 1,
                                  [&](int64_t b, int64_t) {
                                    if (b == 37) throw std::runtime_error("chunk 37");
                                    ++finished;
                                  }),
                 std::runtime_error);
    // With the pool every other chunk still ran; an OpenMP thread stops its piece at the throw.
    if (be == sp::Backend::kPool) EXPECT_EQ(finished.load(), 99);
    // The pool is usable afterwards.
    EXPECT_EQ(visits(50, 1), std::vector<int>(50, 1));
  }
}

TEST(Parallel, NestedCallsRunInlineAndConcurrentCallersBothFinish) {
  Restore restore;
  sp::set_num_threads(2, true);
  std::atomic<int64_t> inner{0};
  sp::parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      sp::parallel_for(10, 1, [&](int64_t ib, int64_t ie) { inner += ie - ib; });
  });
  EXPECT_EQ(inner.load(), 80);

  // Two threads submitting at once: one gets the pool, the other runs its loop itself.
  std::atomic<int64_t> a{0}, b{0};
  auto submit = [](std::atomic<int64_t>& sum) {
    for (int r = 0; r < 2000; ++r)
      sp::parallel_for(64, 4, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
  };
  std::thread t1(submit, std::ref(a)), t2(submit, std::ref(b));
  t1.join();
  t2.join();
  EXPECT_EQ(a.load(), 2000 * 64);
  EXPECT_EQ(b.load(), 2000 * 64);
}

TEST(Parallel, ThreadCountsAreBoundedByTheHardware) {
  Restore restore;
  const int hw = sp::hardware_threads();
  EXPECT_GE(hw, 1);
  EXPECT_THROW(sp::set_num_threads(0), specdec::Error);
  EXPECT_THROW(sp::set_num_threads(-3), specdec::Error);
  try {
    sp::set_num_threads(hw + 1);
    FAIL() << "threads above the hardware count were accepted";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--threads-oversubscribe"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(sp::set_num_threads(hw + 1, /*allow_oversubscribe=*/true));
  EXPECT_EQ(sp::num_threads(), hw + 1);
  // Even when allowed, 100000 threads would exhaust the process: refused with the limit.
  try {
    sp::set_num_threads(100000, true);
    FAIL() << "100000 threads were accepted";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sp::num_threads(), hw + 1);  // a refused count leaves the pool as it was
  EXPECT_THROW(sp::set_spin_us(-1), specdec::Error);
}

// Step's chooser on scripted step times: a quiet machine (the pool 25 % faster) keeps the pool
// but for retries costing ~1 % of the time; a busy one (the pool as slow as one thread, with
// stalls) moves to the thread alone within a few steps; and back when the machine is quiet.
TEST(Parallel, StepChooserFollowsTheFasterModeAndRetriesTheOtherRarely) {
  sp::detail::ModeChooser c;
  int solo = 0;  // steps run alone in the last phase
  // Runs `steps` steps; returns their total time over the time of the faster mode throughout.
  const auto run = [&](int steps, double pool_ms, double solo_ms, int stall_every) {
    double total = 0, pool_total = 0;
    solo = 0;
    for (int i = 0; i < steps; ++i) {
      const int mode = c.pick();
      const double pool = pool_ms + (stall_every > 0 && i % stall_every == 0 ? 6.0 : 0.0);
      c.record(mode, mode == 0 ? pool : solo_ms);
      total += mode == 0 ? pool : solo_ms;
      pool_total += pool;
      solo += mode;
    }
    return total / std::min(pool_total, steps * solo_ms);
  };
  EXPECT_LT(run(1000, 4.5, 6.0, 0), 1.02);  // quiet
  EXPECT_LE(solo, 40);
  // Busy: the pool at 6.2 ms with a 6 ms stall every 4th step, the thread alone at 6.0 ms.
  run(12, 6.2, 6.0, 4);
  EXPECT_GE(solo, 6) << "still on the pool 12 steps into the busy phase";
  EXPECT_LT(run(1000, 6.2, 6.0, 4), 1.02);
  EXPECT_GE(solo, 850);
  // Quiet again: the pool is back within one retry spacing and stays.
  EXPECT_LT(run(1000, 4.5, 6.0, 0), 1.03);
  EXPECT_LE(solo, 70);
}

// Beside a busy process the workers rarely get a core: a pool step then runs the loops on the
// caller, and without a stall it can even beat the thread alone (here 5.0 against 6.0 ms). Such
// a step is starved (its workers ran under a quarter of their share) and counts as lost, so the
// chooser stays alone; when the workers take their share again the pool's times count again.
TEST(Parallel, StepChooserCountsStarvedPoolStepsAsLost) {
  sp::detail::ModeChooser c;
  const auto run = [&](int steps, double pool_ms, bool starved) {
    int solo = 0;
    for (int i = 0; i < steps; ++i) {
      const int mode = c.pick();
      c.record(mode, mode == 0 ? pool_ms : 6.0, mode == 0 && starved);
      solo += mode;
    }
    return solo;
  };
  EXPECT_LE(run(200, 4.5, false), 20);  // quiet: the pool, with rare trials alone
  EXPECT_GE(run(1000, 5.0, true), 950) << "a starved pool won by its times";
  // Quiet again: back on the pool within one retry spacing (a starved pool lost by far: 128 steps).
  EXPECT_LE(run(1000, 4.5, false), 128 + 8);
}

// After a starved loss the chooser asks, before each step, whether every worker would find a
// free core (Step reads the machine's runnable threads). When the busy process leaves, the
// signal brings the pool back within a few steps instead of the 128 of the retry spacing; while
// it stays, the signal stays off and nothing changes; and a signal that is wrong (free cores
// seen, the pool still starved) costs trials that get rarer each time.
TEST(Parallel, StepChooserTriesThePoolSoonWhenCoresAreFreeAgain) {
  sp::detail::ModeChooser c;
  int asked = 0;
  const auto run = [&](int steps, bool busy, bool cores_free) {
    int solo = 0;
    for (int i = 0; i < steps; ++i) {
      if (c.cores_wanted()) {
        ++asked;
        c.cores_free(cores_free);
      }
      const int mode = c.pick();
      c.record(mode, mode == 0 ? (busy ? 5.0 : 4.5) : 6.0, mode == 0 && busy);
      solo += mode;
    }
    return solo;
  };
  EXPECT_LE(run(200, false, true), 20);  // quiet: the pool
  EXPECT_EQ(asked, 0) << "the signal was read with no starved loss to wait out";
  EXPECT_GE(run(1000, true, false), 950) << "busy, no free cores: alone, trials 128 apart";
  EXPECT_GT(asked, 500);
  // The busy process left: back on the pool within a few steps (two alone that see free cores,
  // then the pool's trial, which wins), not the 128 of the retry spacing.
  EXPECT_LE(run(200, false, true), 12);
  EXPECT_LE(run(200, false, true), 20) << "the pool did not stay";
  // The signal wrong: free cores seen, the workers still starved. Trials come 2, 4, .. 64 steps
  // apart, then every 64, so alone keeps most steps: 3 pool steps a trial, about 20 trials.
  run(60, true, false);  // onto the thread alone again
  EXPECT_GE(run(1000, true, true), 900);
}

// While the pool keeps pace (its workers ran at least half their share of the chunks) a trial
// alone waits until another process wants a core: on a quiet machine none runs at all, where
// each would cost 3 steps at one thread's speed. Beside a neighbour the trials run as before and
// find the thread alone; pool steps that do not keep pace call for trials whatever the signal.
TEST(Parallel, StepChooserPutsOffTrialsAloneOnAQuietMachine) {
  sp::detail::ModeChooser c;
  int asked = 0;
  const auto run = [&](int steps, double pool_ms, bool neighbour, bool kept_pace) {
    int solo = 0;
    for (int i = 0; i < steps; ++i) {
      if (c.cores_wanted()) {
        ++asked;
        c.cores_free(!neighbour);
      }
      const int mode = c.pick();
      c.record(mode, mode == 0 ? pool_ms : 6.0, false, mode == 0 && kept_pace);
      solo += mode;
    }
    return solo;
  };
  EXPECT_EQ(run(1000, 4.5, false, true), 0);  // quiet: never alone
  EXPECT_GE(asked, 25);  // asked once every 32 steps
  EXPECT_GE(run(1000, 6.5, true, true), 850) << "a neighbour, the pool slower: still on the pool";
  // Quiet again: the pool's next trial (25 steps after a loss by 8 %) wins it back, and it stays.
  EXPECT_LE(run(1000, 4.5, false, true), 40);
  EXPECT_GT(run(1000, 4.5, false, false), 0) << "the workers lagging, yet no trial alone";
}

// A Step that runs alone keeps every chunk on the calling thread, and so do the loops after it
// until the next Step; the first 3 Steps of a kind use the pool and the next 3 try the thread
// alone; a Step inside a Step changes nothing.
TEST(Parallel, AStepRunAloneKeepsItsLoopsOnTheCallingThread) {
  Restore restore;
  sp::set_num_threads(2, true);
  const auto threads_used = [] {
    std::mutex mu;
    std::set<std::thread::id> ids;
    sp::parallel_for(4096, 1, [&](int64_t, int64_t) {
      volatile double x = 0;
      for (int i = 0; i < 2000; ++i) x = x + i;  // long enough that the worker joins in
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    return ids;
  };
  // Choosers live as long as their thread and are found by (who, kind): a tag of its own per run,
  // so that a second run in one process (--gtest_repeat) starts from a fresh chooser.
  static std::deque<int> tags;
  int& kind_tag = tags.emplace_back(0);
  for (int i = 0; i < 3; ++i) sp::Step first(&kind_tag, 1);  // the pool, 3 times: their times recorded
  {
    sp::Step second(&kind_tag, 1);  // alone: the first step of the first trial of the other mode
    const std::set<std::thread::id> ids = threads_used();
    EXPECT_EQ(ids, std::set<std::thread::id>{std::this_thread::get_id()});
    sp::Step nested(&kind_tag, 2);  // changes nothing: still alone
    EXPECT_EQ(threads_used(), std::set<std::thread::id>{std::this_thread::get_id()});
  }
  // Loops after it, outside any Step, follow its choice: alone, until a Step picks the pool
  // (after the trial's 3 steps: the pool's recorded times, nearly nothing, are the lower).
  EXPECT_EQ(threads_used(), std::set<std::thread::id>{std::this_thread::get_id()});
  for (int i = 0; i < 2; ++i) {
    sp::Step rest_of_trial(&kind_tag, 1);
    threads_used();
  }
  { sp::Step back(&kind_tag, 1); }
  const auto pooled = [&] {
    for (int attempt = 0; attempt < 20; ++attempt)
      if (threads_used().size() > 1) return true;
    return false;
  };
  EXPECT_TRUE(pooled());
  // A Step that does not choose (the OpenMP backend here) leaves no earlier choice behind.
  for (int i = 0; i < 3; ++i) sp::Step second_kind(&kind_tag, 3);
  { sp::Step alone(&kind_tag, 3); }  // the fourth of a kind runs alone: its choice stays
  if (!sp::openmp_available()) {
    EXPECT_THROW(sp::set_backend(sp::Backend::kOpenMP), specdec::Error);
    return;
  }
  sp::set_backend(sp::Backend::kOpenMP);
  { sp::Step not_choosing(&kind_tag, 3); }
  EXPECT_TRUE(pooled());
}
