#pragma once
// A competing CPU-bound process for measurements on a busy machine: a forked busy loop at a
// chosen nice level, killed when the object goes out of scope. Used by the contention
// benchmark (experiments/micro/bench_model_contention.cpp) and the quickstart-under-load test.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace specdec::testing {

class Competitor {
 public:
  explicit Competitor(int nice_level) {
    pid_ = fork();
    if (pid_ == 0) {  // child: only async-signal-safe calls from here on
      setpriority(PRIO_PROCESS, 0, nice_level);
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // let the scheduler see it
  }
  ~Competitor() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Competitor(const Competitor&) = delete;
  Competitor& operator=(const Competitor&) = delete;
  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

}  // namespace specdec::testing
