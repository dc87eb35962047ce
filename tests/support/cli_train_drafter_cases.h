#pragma once
// `specdec train-drafter` through the CLI, written once for its two files:
//   tests/unit/test_cli_train_drafter_tiny.cpp            a tiny GGUF and a corpus of its own
//                                                         samples (seconds)
//   tests/integration/test_cli_train_drafter_smollm2.cpp  SmolLM2-135M on its corpus (heavy,
//                                                         ~2-3 minutes)
// Both files go to one test program (tests_harness), where a suite may be defined once: their
// TEST lines stay in each file, under their own suite names, and call what is here.
//  - a head trained from a config is used by `specdec generate` (drafter eagle, T = 0), which
//    returns greedy's tokens and accepts some of its drafts;
//  - a run killed with SIGKILL mid-training continues from its checkpoint when rerun: the
//    features are read back, not made again, and the steps go on from the saved one;
//  - --train-on trains on the first stored sequences only, from a copy of a run's features;
//  - bad options and config keys are named errors (exit 1; the CLI's parsing run in this
//    program, one case through the binary).
// The functions that assert are called through ASSERT_NO_FATAL_FAILURE.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/cli_in_process.h"
#include "tests/support/command.h"
#include "tests/support/paths.h"

namespace specdec::testing_support {

struct TrainCliTarget {
  std::string model;                 // --model: a catalog name or a GGUF file
  std::string name;                  // the target's name in head.json
  std::vector<std::string> corpus;   // the corpus option ({"--corpus", DIR}) or none (the default)
  std::vector<std::string> threads;  // the threads option of training and generation, or none
  int64_t vocab = 0;                 // the vocabulary's size: --topk's and --draft-vocab's bound
  std::string dir_prefix;            // temp_dir(name) is dir_prefix + name
  // Waiting for the killed run's first checkpoint: how often to look, and how long to let it
  // run on before the kill (a few steps, far from its end).
  std::chrono::milliseconds poll{200}, run_on{500};
};

inline std::string train_cli_command(const std::vector<std::string>& args) {
  return command_line(binary_dir() + "/specdec", args);
}
inline Output train_cli_run(const std::vector<std::string>& args) { return shell(train_cli_command(args)); }

// The JSON object of the last output line (discarded, not thrown, when there is none).
inline nlohmann::json last_json(const Output& o) {
  const auto brace = o.text.rfind("\n{");
  return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1), nullptr, false);
}

// A fresh (removed) folder for one test's output.
inline std::string temp_dir(const TrainCliTarget& t, const std::string& name) {
  const std::string d = t.dir_prefix + name;
  std::filesystem::remove_all(d);
  return d;
}

inline std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// train-drafter OPTIONS --quiet --json: exit 0, its JSON in *r; prints what it took and reached.
inline void train_drafter(const std::vector<std::string>& options, nlohmann::json* r) {
  const auto t0 = std::chrono::steady_clock::now();
  const Output o = train_cli_run(concat(concat({"train-drafter"}, options), {"--quiet", "--json"}));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(o.code, 0) << o.text;
  *r = last_json(o);
  std::printf("trained in %.1f s (features %.2f s, training %.2f s, %lld steps): held-out top-1 %.3f (untrained "
              "%.3f)\n",
              s, r->value("seconds_features", 0.0), r->value("seconds_training", 0.0),
              static_cast<long long>(r->value("steps", 0)), r->value("held_out_top1", 0.0),
              r->value("held_out_top1_untrained", 0.0));
}

// The EAGLE head in `out`: its weights, and head.json naming its kind and the target.
inline void expect_eagle_head(const TrainCliTarget& t, const std::string& out) {
  EXPECT_TRUE(std::filesystem::exists(out + "/head.safetensors"));
  std::ifstream cfg(out + "/head.json");
  const nlohmann::json head = nlohmann::json::parse(cfg, nullptr, false);
  EXPECT_EQ(head.value("kind", ""), "eagle");
  EXPECT_EQ(head["target"].value("name", ""), t.name);
}

// `specdec generate` with drafter eagle and the head in `head` at T = 0 prints greedy's tokens
// for `prompt` (64 of them) and accepts some drafts.
inline void expect_eagle_generation_equals_greedy(const TrainCliTarget& t, const std::string& head,
                                                  const std::string& prompt) {
  const std::vector<std::string> common =
      concat(concat({"generate", "--model", t.model, "--max-new-tokens", "64", "--json"}, t.threads),
             {"--prompt", prompt});
  const std::vector<std::string> eagle = concat(common, {"--strategy", "speculative", "--set", "drafter=eagle", "--set",
                                                         "temperature=0", "--set", "eagle_head=" + head});
  const nlohmann::json g = last_json(train_cli_run(common)), e = last_json(train_cli_run(eagle));
  ASSERT_TRUE(g.contains("tokens") && e.contains("tokens")) << g.dump() << "\n" << e.dump();
  EXPECT_EQ(e["tokens"], g["tokens"]);
  EXPECT_GT(e["stats"].value("n_accepted", 0), 0) << e["stats"].dump();
  std::printf("eagle at T=0: alpha %.3f, tau %.2f\n", e["stats"].value("alpha", 0.0), e["stats"].value("tau", 0.0));
}

// A Medusa run of 40 epochs (160 steps) killed with SIGKILL soon after its first checkpoint
// continues from it when rerun: it resumes past step 0, reads every sequence's features back and
// ends at the full step count.
inline void expect_a_killed_run_continues_from_its_checkpoint(const TrainCliTarget& t) {
  const int epochs = 40;
  const std::string out = temp_dir(t, "resume");
  const std::vector<std::string> args =
      concat(concat(concat(concat({"train-drafter", "--model", t.model, "--kind", "medusa", "--out", out}, t.corpus),
                           {"--tokens", "2048", "--held-out-tokens", "512", "--seq-len", "128", "--epochs",
                            std::to_string(epochs), "--checkpoint-every", "0"}),
                    t.threads),
             {"--quiet", "--json"});
  const Output started = shell(train_cli_command(args) + " > /dev/null 2>&1 & echo $!");
  const int pid = std::stoi(started.text);
  const std::string state = out + "/checkpoint/state.safetensors";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(state) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(t.poll);
  ASSERT_TRUE(std::filesystem::exists(state)) << "no checkpoint after 120 s";
  std::this_thread::sleep_for(t.run_on);  // a few more steps
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  shell("while kill -0 " + std::to_string(pid) + " 2>/dev/null; do sleep 0.05; done");
  EXPECT_FALSE(std::filesystem::exists(out + "/head.json")) << "the run finished before it was killed";
  const Output o = train_cli_run(args);
  ASSERT_EQ(o.code, 0) << o.text;
  const nlohmann::json r = last_json(o);
  std::printf("resumed at step %lld of %lld\n", static_cast<long long>(r.value("resumed_at_step", 0)),
              static_cast<long long>(r.value("steps", 0)));
  EXPECT_GT(r.value("resumed_at_step", 0), 0) << r.dump();
  EXPECT_EQ(r.value("sequences_from_disk", 0), 16 + 4) << r.dump();  // 2048 / 128 training + 512 / 128 held out
  EXPECT_EQ(r.value("steps", 0), epochs * 16 / 4) << r.dump();
  EXPECT_TRUE(std::filesystem::exists(out + "/head.json"));
}

// --train-on: a data-scaling point from features already stored. A copy of a run's features
// trains on their first sequences only, without remaking any.
inline void expect_train_on_uses_the_first_stored_sequences_only(const TrainCliTarget& t) {
  namespace fs = std::filesystem;
  const std::string full = temp_dir(t, "train_on_full"), part = temp_dir(t, "train_on_part");
  const std::vector<std::string> args =
      concat(concat(concat({"train-drafter", "--model", t.model, "--kind", "medusa"}, t.corpus),
                    {"--tokens", "2048", "--held-out-tokens", "512", "--seq-len", "128", "--epochs", "4"}),
             concat(t.threads, {"--quiet", "--json"}));
  const Output first = train_cli_run(concat(args, {"--out", full}));
  ASSERT_EQ(first.code, 0) << first.text;
  EXPECT_EQ(last_json(first).value("steps", 0), 4 * 16 / 4) << first.text;
  EXPECT_EQ(last_json(first).value("sequences_from_disk", -1), 0) << first.text;  // all made
  fs::create_directories(part + "/checkpoint");
  for (const auto& e : fs::directory_iterator(full + "/checkpoint"))
    if (e.path().filename() != "state.safetensors")
      fs::copy(e.path(), part + "/checkpoint/" + e.path().filename().string());
  const Output o = train_cli_run(concat(args, {"--out", part, "--train-on", "1024"}));
  ASSERT_EQ(o.code, 0) << o.text;
  const nlohmann::json r = last_json(o);
  EXPECT_EQ(r.value("sequences_from_disk", 0), 16 + 4) << r.dump();  // every stored sequence read, none made
  EXPECT_EQ(r.value("train_tokens", 0), 1024) << r.dump();
  EXPECT_EQ(r.value("steps", 0), 4 * 8 / 4) << r.dump();  // 4 epochs of the first 8 sequences
}

// Bad options and config keys: exit 1 with a message naming the option or key and the value;
// a refused run writes no output folder.
inline void expect_bad_options_and_keys_are_named_errors(const TrainCliTarget& t) {
  const std::string out = temp_dir(t, "bad");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  std::filesystem::create_directories(out);
  std::ofstream(out + "/bad.yaml") << "model: " << t.model << "\nkind: eagle\nlearning_rate: 0.1\n";
  std::ofstream(out + "/nomodel.yaml") << "kind: eagle\nout: " << out << "/x\n";
  std::ofstream(out + "/badvalue.yaml") << "model: " << t.model << "\ntokens: lots\n";
  const std::vector<std::string> base = concat(concat({"--model", t.model}, t.corpus), {"--out", out + "/h"});
  const std::string vocab = std::to_string(t.vocab);
  const std::vector<Case> cases = {
      {concat(base, {"--kind", "hydra"}), "--kind must be eagle or medusa, got 'hydra'"},
      {concat(base, {"--topk", "-1"}), "--topk must be in [0, " + vocab + "], got -1"},
      {concat(base, {"--seq-len", "4"}), "--seq-len must be in [16, 4096], got 4"},
      {concat(base, {"--unroll", "0"}), "--unroll must be in [1, 16], got 0"},
      {concat(base, {"--loss-vocab", "all"}), "--loss-vocab must be topk or draft, got 'all'"},
      {concat(base, {"--w-cls", "-1"}), "--w-cls and --feature-noise must be >= 0, got -1"},
      {concat(base, {"--tokens", "4096", "--train-on", "8192"}),
       "--train-on must be in [0, --tokens = 4096] (0: all), got 8192"},
      {concat(base, {"--data", "dialogue"}), "--data must be text or chat, got 'dialogue'"},
      {concat(base, {"--draft-vocab", "50000"}),
       "--draft-vocab must be in [0, " + vocab + "] (0: the whole vocabulary), got 50000"},
      {{"--model", t.model, "--out", out + "/h", "--corpus", "/nonexistent/text"},
       "corpus path '/nonexistent/text' does not exist"},
      {{"--model", t.model}, "--out DIR is required"},
      {{"--config", out + "/bad.yaml"}, "unknown key 'learning_rate'"},
      {{"--config", out + "/nomodel.yaml"}, "'model' is required"},
      {{"--config", out + "/badvalue.yaml"}, ".tokens: bad value 'lots'"},
  };
  // The first case through the binary (the exit code a shell sees), the others through
  // cli::dispatch in this program (tests/support/cli_in_process.h): a refusal takes milliseconds,
  // a process start ~0.35-1 s.
  for (const Case& c : cases) {
    const std::vector<std::string> a = concat({"train-drafter"}, c.args);
    const Output o = &c == &cases.front() ? train_cli_run(a) : run_in_process(a);
    EXPECT_EQ(o.code, 1) << train_cli_command(a) << "\n" << o.text;
    EXPECT_NE(o.text.find(c.says), std::string::npos) << "expected '" << c.says << "' in:\n" << o.text;
  }
  EXPECT_FALSE(std::filesystem::exists(out + "/h")) << "a refused run wrote its output folder";
}

}  // namespace specdec::testing_support
