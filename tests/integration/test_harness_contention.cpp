// The shrunk quickstart on a busy machine: with one competing busy process (nice 0) on the
// 2 cores it must finish within 3x its quiet time, measured in this test. Its five greedy
// cells (every strategy family at temperature 0, with the greedy-equality check) take ~12 s
// quiet on 2 cores. The OpenMP engine it replaced took ~11x (1233 s instead of ~110 s for the
// shrunk quickstart of then, issue 10): every one of ~200 parallel regions per step waited for
// a descheduled thread. A timed check, so heavy tier (2026-12-02); bench_model_contention keeps
// the figure (docs/busy_machine.md).
// ctest-heavy: *
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "harness/experiment.h"
#include "harness/runner.h"
#include "tests/support/competitor.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec::harness;
namespace fs = std::filesystem;

namespace {

double run_seconds(const ExperimentConfig& cfg, const std::string& out) {
  fs::remove_all(out);
  RunOptions opt;
  opt.out_dir = out;
  opt.progress = false;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_experiment(cfg, opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.n_finished, 5);
  EXPECT_TRUE(r.checks_passed);
  fs::remove_all(out);
  return s;
}

}  // namespace

TEST(HarnessContention, ShrunkQuickstartUnderABusyNeighbourWithin3xQuiet) {
  const std::string model = source_dir() + "/models/smollm2-135m-instruct.gguf";
  ASSERT_TRUE(fs::exists(model)) << model << " is missing; run scripts/fetch_models.sh smollm2-135m";
  const auto cfg = load_experiment(source_dir() + "/experiments/quickstart.yaml",
                                   {"repeats=1", "warmup=0", "max_new_tokens=12", "prompts.limit=1", "plots=false",
                                    "sweep.temperature=[0]"});
  const std::string out = (fs::temp_directory_path() / "specdec_contention_quickstart").string();
  run_seconds(cfg, out);  // warm-up: page cache, allocator, lazily built tables
  // Quiet, then loaded, interleaved; a second pair only if the first misses (a neighbour of
  // the test machine itself can spoil one pair).
  double best = 1e9;
  for (int attempt = 0; attempt < 2 && best > 3.0; ++attempt) {
    const double quiet = run_seconds(cfg, out);
    double loaded = 0;
    {
      specdec::testing::Competitor busy(0);
      ASSERT_TRUE(busy.running());
      loaded = run_seconds(cfg, out);
    }
    const double ratio = loaded / quiet;
    std::printf("attempt %d: quiet %.1f s, with a busy neighbour %.1f s, ratio %.2f\n", attempt + 1, quiet, loaded,
                ratio);
    best = std::min(best, ratio);
  }
  EXPECT_LE(best, 3.0);
}
