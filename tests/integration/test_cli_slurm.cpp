// `specdec run --executor slurm` on a real single-node Slurm (scripts/slurm_local.sh, needs
// root: it installs slurm-wlm + munge and starts the daemons): a shrunk tiny_ci experiment as
// an array of 4 tasks plus the merge job equals a local run of the same experiment (the same
// cells in the same order, token counts, alpha/tau, acceptance per position, check verdicts
// and p-values); env.json and the report name the node of every task. A task made to fail is
// listed by id with its log, and --resume resubmits that task only.
// Label "slurm;integration" (tests/CMakeLists.txt); about a minute.
// ctest-heavy: *
// (heavy since 2026-12-02: ~45 s, much of it starting the Slurm daemons; shards and their merge
// stay in the fast tier through test_harness_spec_bench_smollm2.)
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::source_dir;

namespace fs = std::filesystem;
using nlohmann::json;

namespace test_cli_slurm {  // this file's own names (its tests compile in a batch with others)

const std::string kBin = binary_dir() + "/specdec";
const std::string kTiny = source_dir() + "/experiments/tiny_ci.yaml";
const std::string kScript = source_dir() + "/scripts/slurm_local.sh";
// tiny_ci's 7 cells (greedy, sampling x 2 temperatures, beam, spec-draft x gamma 2/4 x 2
// temperatures), smaller check samples.
const std::string kSets =
    " --set repeats=1 --set warmup=0 --set checks.first_token.samples=300 --set checks.sequence.samples=100";

using specdec::testing_support::Output;

Output sh(const std::string& cmd) { return specdec::testing_support::shell(cmd); }

Output run_specdec(const std::string& args) { return sh(kBin + " " + args); }

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> records(const fs::path& p) {
  std::vector<json> out;
  std::istringstream in(text_of(p));
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

fs::path temp(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("specdec_slurm_" + name);
  fs::remove_all(d);
  return d;
}

// "array job 12 (4 tasks)" / "merge job 13" in specdec's output.
std::string job_id(const std::string& text, const std::string& what) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, std::regex(what + " job ([0-9]+)"))) << what << " job in " << text;
  return m.size() > 1 ? m[1].str() : "";
}

// Waits until none of `jobs` (array tasks included) is pending or running; false after `limit`.
bool wait_jobs(const std::vector<std::string>& jobs, std::chrono::seconds limit = std::chrono::seconds(240)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    const Output q = sh("squeue -h -r -o %i");
    bool active = false;
    std::istringstream in(q.text);
    for (std::string id; std::getline(in, id);)
      for (const auto& j : jobs) active = active || (!j.empty() && id.substr(0, id.find('_')) == j);
    if (q.code == 0 && !active) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return false;
}

// The merged run's cells equal the local run's: same keys in the same order, the same
// deterministic figures and the same check outcomes. (Speeds differ from run to run.)
void expect_same_cells(const fs::path& local, const fs::path& merged) {
  const auto a = records(local / "cells.jsonl"), b = records(merged / "cells.jsonl");
  ASSERT_EQ(a.size(), 7u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string key = a[i]["key"];
    EXPECT_EQ(b[i]["key"], key);
    for (const char* k : {"n_prompts", "n_generated", "n_drafted", "n_accepted", "n_rounds", "n_target_forwards",
                          "alpha", "tau", "acceptance_per_position", "gamma", "baseline"})
      EXPECT_EQ(b[i][k], a[i][k]) << key << " " << k;
    ASSERT_EQ(b[i]["checks"].size(), a[i]["checks"].size()) << key;
    for (size_t c = 0; c < a[i]["checks"].size(); ++c)
      for (const char* k : {"name", "pass", "p_value", "n_samples", "detail"})
        EXPECT_EQ(b[i]["checks"][c][k], a[i]["checks"][c][k]) << key << " check " << c << " " << k;
  }
  // metrics.json and summary.csv derive from the same cells.
  const json ma = json::parse(text_of(local / "metrics.json")), mb = json::parse(text_of(merged / "metrics.json"));
  ASSERT_EQ(mb["cells"].size(), ma["cells"].size());
  for (size_t i = 0; i < ma["cells"].size(); ++i) EXPECT_EQ(mb["cells"][i]["key"], ma["cells"][i]["key"]);
  EXPECT_EQ(records(merged / "samples.jsonl").size(), records(local / "samples.jsonl").size());
  std::string sa = text_of(local / "summary.csv"), sb = text_of(merged / "summary.csv");
  EXPECT_EQ(std::count(sb.begin(), sb.end(), '\n'), std::count(sa.begin(), sa.end(), '\n'));
}

std::string hostname() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}

class CliSlurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "not root: scripts/slurm_local.sh installs and starts Slurm as root";
      return;
    }
    if (sh("command -v slurmctld").code != 0 && sh("command -v apt-get").code != 0) {
      skip_ = "Slurm is not installed and there is no apt-get to install it";
      return;
    }
    started_ = sh("bash " + kScript + " status").code != 0;  // a cluster already up is left running
    const Output s = sh("bash " + kScript + " start");
    ASSERT_EQ(s.code, 0) << s.text;
    local_ = temp("local");
    const Output l = run_specdec("run " + kTiny + " --quiet --out " + local_.string() + kSets);
    ASSERT_EQ(l.code, 0) << l.text;
  }
  static void TearDownTestSuite() {
    if (skip_.empty() && started_) sh("bash " + kScript + " stop");
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  static std::string skip_;
  static bool started_;
  static fs::path local_;
};
std::string CliSlurm::skip_;
bool CliSlurm::started_ = false;
fs::path CliSlurm::local_;

TEST_F(CliSlurm, ArrayOfFourThenMergeEqualsLocalRun) {
  const fs::path out = temp("array");
  const Output o = run_specdec("run " + kTiny + " --executor slurm --slurm-shards 4 --slurm-opt time=00:10:00 --out " +
                           out.string() + kSets);
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("4 array tasks"), std::string::npos) << o.text;
  const std::string array = job_id(o.text, "array"), merge = job_id(o.text, "merge");
  ASSERT_TRUE(wait_jobs({array, merge})) << "jobs " << array << ", " << merge << " still queued";
  const std::string script = text_of(out / "slurm" / "array.sbatch");
  EXPECT_NE(script.find("#SBATCH --array=0-3"), std::string::npos) << script;
  EXPECT_NE(script.find("#SBATCH --time=00:10:00"), std::string::npos) << script;
  EXPECT_NE(text_of(out / "slurm" / "merge.sbatch").find("#SBATCH --time=00:10:00"), std::string::npos);
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(fs::exists(out / "shards" / std::to_string(t) / "cells.jsonl")) << t;
  ASSERT_TRUE(fs::exists(out / "report.md")) << "the merge job wrote no report; logs in " << (out / "slurm" / "logs");
  expect_same_cells(local_, out);

  // Which node ran what: env.json keeps every task's env, the report names the nodes.
  const json env = json::parse(text_of(out / "env.json"));
  ASSERT_EQ(env["shards"].size(), 4u) << env.dump(2);
  std::set<std::string> cells;
  for (size_t t = 0; t < 4; ++t) {
    const json& s = env["shards"][t];
    EXPECT_EQ(s["task"], t);
    EXPECT_EQ(s["node"], hostname());
    EXPECT_EQ(s["env"]["slurm_array_job"], array + "_" + std::to_string(t)) << s.dump(2);
    for (const auto& c : s["cells"]) EXPECT_TRUE(cells.insert(c.get<std::string>()).second) << c;
  }
  EXPECT_EQ(cells.size(), 7u);
  const std::string report = text_of(out / "report.md");
  EXPECT_NE(report.find("which node ran what"), std::string::npos) << report;
  EXPECT_NE(report.find("| task 3 | " + hostname() + " | " + array + "_3"), std::string::npos) << report;
  if (sh("python3 -c 'import matplotlib'").code == 0) {
    EXPECT_TRUE(fs::exists(out / "speedup_vs_gamma.png"));
  }
  // --resume on a finished, merged run submits nothing.
  const Output again = run_specdec("run " + kTiny + " --executor slurm --resume --out " + out.string() + kSets);
  EXPECT_EQ(again.code, 0) << again.text;
  EXPECT_NE(again.text.find("every shard finished and the run is merged"), std::string::npos) << again.text;
  EXPECT_EQ(records(out / "slurm" / "submissions.jsonl").size(), 1u);
}

TEST_F(CliSlurm, FailedTaskIsListedAndResumeResubmitsOnlyIt) {
  const fs::path out = temp("fail");
  const Output o = run_specdec("run " + kTiny + " --executor slurm --slurm-shards 4 --no-submit --out " + out.string() +
                           kSets);
  ASSERT_EQ(o.code, 0) << o.text;
  // Task 2 cannot create its shard folder: a file stands in its place.
  fs::create_directories(out / "shards");
  std::ofstream(out / "shards" / "2") << "in the way\n";
  // Submitted by hand with the commands --no-submit printed.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.text, m, std::regex("  (sbatch --parsable --array=0,1,2,3 [^\n]+)\n"))) << o.text;
  const Output a = sh(m[1].str());
  ASSERT_EQ(a.code, 0) << a.text;
  const std::string array = a.text.substr(0, a.text.find_first_of(";\n"));
  ASSERT_TRUE(std::regex_search(o.text, m, std::regex("  (sbatch --parsable --dependency=afterok:)<array job id>( [^\n]+)\n")))
      << o.text;
  const Output b = sh(m[1].str() + array + m[2].str());
  ASSERT_EQ(b.code, 0) << b.text;
  const std::string merge = b.text.substr(0, b.text.find_first_of(";\n"));
  ASSERT_TRUE(wait_jobs({array, merge}));
  EXPECT_FALSE(fs::exists(out / "report.md")) << "the merge ran although task 2 failed";

  // The merge lists task 2 (only) with its log, whose last line says why.
  const Output mg = run_specdec("merge " + out.string());
  EXPECT_EQ(mg.code, 1) << mg.text;
  EXPECT_NE(mg.text.find("task 2 (cells"), std::string::npos) << mg.text;
  EXPECT_NE(mg.text.find((out / "slurm" / "logs" / ("task-2_" + array + ".log")).string()), std::string::npos)
      << mg.text;
  EXPECT_NE(mg.text.find("shards/2"), std::string::npos) << mg.text;  // the error in the log
  for (const char* other : {"task 0 (", "task 1 (", "task 3 ("})
    EXPECT_EQ(mg.text.find(other), std::string::npos) << other << " listed: " << mg.text;

  // --resume resubmits task 2 only, and the merge.
  fs::remove(out / "shards" / "2");
  const Output r = run_specdec("run " + kTiny + " --executor slurm --resume --out " + out.string() + kSets);
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("(1 tasks)"), std::string::npos) << r.text;
  const auto subs = records(out / "slurm" / "submissions.jsonl");
  ASSERT_EQ(subs.size(), 1u);  // the hand-submitted jobs are not recorded
  EXPECT_EQ(subs[0]["tasks"], json::array({2}));
  ASSERT_TRUE(wait_jobs({job_id(r.text, "array"), job_id(r.text, "merge")}));
  ASSERT_TRUE(fs::exists(out / "report.md")) << "no report after the resubmitted task; logs in "
                                              << (out / "slurm" / "logs");
  expect_same_cells(local_, out);
}

TEST_F(CliSlurm, BadSlurmInputExitsOne) {
  const fs::path out = temp("bad");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--executor cluster", "--executor 'cluster'"},
      {"--executor slurm --slurm-opt '=x'", "--slurm-opt '=x'"},
      {"--executor slurm --slurm-opt array=1-3", "--array is set by specdec"},
      {"--executor slurm --slurm-shards 99", "--slurm-shards 99"},
      {"--slurm-opt partition=x", "--executor slurm only"},
      {"--executor slurm --resume", "needs --out"},
      {"--cells 5:2", "--cells '5:2'"},
      {"--cells 3:99", "--cells 3:99"},
  };
  for (const auto& [args, msg] : cases) {
    const bool slurm = args.find("--executor slurm") != std::string::npos;
    const bool resume = args.find("--resume") != std::string::npos;  // without --out
    const Output o = run_specdec("run " + kTiny + (slurm ? " --no-submit" : "") + (resume ? "" : " --out " + out.string()) +
                             " " + args);
    EXPECT_EQ(o.code, 1) << args << ": " << o.text;
    EXPECT_NE(o.text.find(msg), std::string::npos) << msg << " not in " << o.text;
  }
  const Output m = run_specdec("merge " + source_dir());
  EXPECT_EQ(m.code, 1) << m.text;
}

}  // namespace test_cli_slurm
