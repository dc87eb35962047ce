// Bad inputs on the real model (issue 14; the weight-free table is tests/unit/test_bad_inputs.cpp):
// SmolLM2-135M through the catalog name, driven through build/specdec.
//  - a tiny temperature (1e-300, 1e-6) is greedy, exactly: same tokens as greedy decoding;
//  - a prompt beyond the 8192-token context and a max_new_tokens beyond it are errors;
//  - a prompt file that is not UTF-8 generates (byte-level BPE takes any bytes);
//  - a run writes only below its results root, and an experiment named ".." writes nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>
#include "tests/support/command.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;

namespace fs = std::filesystem;

namespace test_bad_inputs_smollm2 {  // this file's own names (its tests compile in a batch with others)

const std::string kBin = binary_dir() + "/specdec";

fs::path sandbox() {
  static const fs::path root =
      fs::temp_directory_path() / ("specdec_bad_inputs_smollm2_" + std::to_string(::getpid()));
  return root;
}

struct Output {
  int code = -1;
  std::string out;  // stdout
  std::string all;  // stdout + stderr
};

Output run(const std::vector<std::string>& args) {
  fs::create_directories(sandbox() / "work");
  const std::string err = (sandbox() / "stderr.txt").string();
  using specdec::testing_support::quote;
  const std::string cmd = "cd " + quote((sandbox() / "work").string()) + " && " +
                          specdec::testing_support::command_line(kBin, args) + " 2>" + quote(err);
  Output o;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  const int st = ::pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err);
  o.all = o.out + std::string(std::istreambuf_iterator<char>(e), {});
  return o;
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

std::set<std::string> files_under(const fs::path& root) {
  std::set<std::string> out;
  if (!fs::exists(root)) return out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it)
    out.insert(it->path().string());
  return out;
}

class BadInputsSmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { fs::remove_all(sandbox()); }
  static void TearDownTestSuite() { fs::remove_all(sandbox()); }

  static nlohmann::json tokens(std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate", "--model", "smollm2-135m", "--prompt", "The capital of France is",
                                  "--max-new-tokens", "24", "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const Output o = run(a);
    EXPECT_EQ(o.code, 0) << o.all;
    return o.code == 0 ? nlohmann::json::parse(o.out)["tokens"] : nlohmann::json();
  }
};

TEST_F(BadInputsSmolLM2, TinyTemperatureIsGreedyExactly) {
  const auto greedy = tokens({});
  ASSERT_EQ(greedy.size(), 24u);
  EXPECT_EQ(tokens({"--strategy", "sampling", "--set", "temperature=1e-300", "--seed", "1"}), greedy);
  EXPECT_EQ(tokens({"--strategy", "sampling", "--set", "temperature=1e-6", "--seed", "2"}), greedy);
  EXPECT_EQ(tokens({"--strategy", "speculative", "--set", "drafter=ngram", "--set", "temperature=1e-300"}), greedy);
}

TEST_F(BadInputsSmolLM2, PromptBeyondContextIsAnError) {
  std::string text;
  for (int i = 0; i < 9000; ++i) text += " a";
  write(sandbox() / "long.txt", text);
  const Output o = run({"generate", "--model", "smollm2-135m", "--prompt-file", (sandbox() / "long.txt").string(),
                        "--max-new-tokens", "4"});
  EXPECT_EQ(o.code, 1) << o.all;
  EXPECT_NE(o.all.find("exceeds the model context of 8192 tokens"), std::string::npos) << o.all;
  const Output m = run({"generate", "--model", "smollm2-135m", "--prompt", "hi", "--max-new-tokens", "100000"});
  EXPECT_EQ(m.code, 1) << m.all;
  EXPECT_NE(m.all.find("max_new_tokens (100000) exceeds the model context of 8192"), std::string::npos) << m.all;
}

// --graphs (the ATen engine's static steps): a value it does not know, and static steps asked of
// the packed CPU engine, are named errors, before anything is generated.
TEST_F(BadInputsSmolLM2, GraphsValueAndEngineAreNamed) {
  const Output o = run({"generate", "--model", "smollm2-135m", "--prompt", "hi", "--graphs", "maybe"});
  EXPECT_EQ(o.code, 1) << o.all;
  EXPECT_NE(o.all.find("graphs 'maybe' is not valid (use auto, on or off)"), std::string::npos) << o.all;
  const Output p = run({"generate", "--model", "smollm2-135m", "--prompt", "hi", "--graphs", "on"});
  EXPECT_EQ(p.code, 1) << p.all;
  EXPECT_NE(p.all.find("graphs on needs the ATen engine"), std::string::npos) << p.all;
}

TEST_F(BadInputsSmolLM2, NonUtf8PromptGenerates) {
  write(sandbox() / "latin1.txt", std::string("Caf\xe9 cr\xe8me \xff\xfe na\xefve"));
  const Output o = run({"generate", "--model", "smollm2-135m", "--prompt-file", (sandbox() / "latin1.txt").string(),
                        "--max-new-tokens", "6", "--json"});
  ASSERT_EQ(o.code, 0) << o.all;
  EXPECT_EQ(nlohmann::json::parse(o.out)["tokens"].size(), 6u);
  const Output t = run({"tokenize", "--model", "smollm2-135m", "--text", "\xff\xfe caf\xe9", "--json"});
  EXPECT_EQ(t.code, 0) << t.all;
}

TEST_F(BadInputsSmolLM2, RunWritesOnlyBelowItsResultsRoot) {
  const fs::path exp = sandbox() / "in" / "mini.yaml";
  write(exp, "name: mini\nmodels: {target: smollm2-135m}\nprompts: [\"Hello\"]\nstrategies: [greedy]\n"
             "max_new_tokens: 2\nrepeats: 1\nwarmup: 0\nplots: false\n"
             "checks: {greedy_equality: false, first_token: false, sequence: false}\n");
  const fs::path root = sandbox() / "work" / "results";
  fs::create_directories(root);
  const auto outside_before = files_under(sandbox());
  const Output bad = run({"run", exp.string(), "--quiet", "--results-root", root.string(), "--set", "name=.."});
  EXPECT_EQ(bad.code, 1) << bad.all;
  EXPECT_NE(bad.all.find("'..' is not allowed"), std::string::npos) << bad.all;
  for (const auto& p : files_under(sandbox()))
    EXPECT_TRUE(outside_before.count(p) || p == (sandbox() / "stderr.txt").string()) << "written: " << p;

  const Output ok = run({"run", exp.string(), "--quiet", "--results-root", root.string()});
  ASSERT_EQ(ok.code, 0) << ok.all;
  for (const auto& p : files_under(sandbox())) {
    if (outside_before.count(p) || p == (sandbox() / "stderr.txt").string()) continue;
    EXPECT_EQ(p.rfind((root / "mini").string(), 0), 0u) << "written outside results/mini: " << p;
  }
  EXPECT_TRUE(fs::exists(root / "mini"));
}

}  // namespace test_bad_inputs_smollm2
