// Experiment YAML parsing: defaults, overrides, and every error path with its message
// (file, key path and bad value must all appear).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "harness/experiment.h"
#include "sampling/grammar.h"

using namespace specdec;
using namespace specdec::harness;

namespace {

const char* kMinimal = R"(
models: {target: tiny-llama}
prompts: ["hello"]
strategies: [greedy]
)";

// Expects parse to throw specdec::Error whose message contains every fragment.
void expect_error(const std::string& yaml, const std::vector<std::string>& fragments,
                  const std::vector<std::string>& overrides = {}) {
  try {
    parse_experiment(yaml, "exp.yaml", overrides);
    FAIL() << "no error for:\n" << yaml;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

std::string with(const std::string& extra) { return std::string(kMinimal) + extra; }

}  // namespace

TEST(HarnessConfig, MinimalGetsDefaults) {
  const auto c = parse_experiment(kMinimal, "dir/my_exp.yaml");
  EXPECT_EQ(c.name, "my_exp");  // file stem
  EXPECT_EQ(c.target.name, "tiny-llama");
  EXPECT_EQ(c.target.dtype, "auto");
  EXPECT_EQ(c.target.threads, 2);
  EXPECT_FALSE(c.draft.has_value());
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(c.prompts[0].id, "p0");
  EXPECT_EQ(c.prompts[0].category, "default");
  EXPECT_FALSE(c.prompts[0].chat);
  ASSERT_EQ(c.strategies.size(), 1u);
  EXPECT_EQ(c.strategies[0].label, "greedy");
  EXPECT_EQ(c.repeats, 3);
  EXPECT_EQ(c.warmup, 1);
  EXPECT_EQ(c.seed, 1234u);
  EXPECT_EQ(c.max_new_tokens, 64);
  EXPECT_TRUE(c.eos);
  EXPECT_TRUE(c.checks.greedy_equality);
  EXPECT_DOUBLE_EQ(c.checks.significance, 0.01);
  EXPECT_FALSE(c.checks.inject_residual_bug);
}

TEST(HarnessConfig, FullSchema) {
  const auto c = parse_experiment(R"(
name: full
description: all keys
models:
  target: {name: tiny-llama, seed: 3, threads: 1}
  draft: tiny-llama
  dtype: float32
  threads: 2
prompts:
  inline:
    - "a"
    - {text: "b", chat: true, category: code, id: second}
  chat: false
  limit: 5
strategies:
  - greedy
  - {name: speculative, label: spec-ngram, params: {drafter: ngram, gamma: 3}}
sweep: {gamma: [1, 2], temperature: [0, 0.7]}
repeats: 2
warmup: 0
seed: 7
max_new_tokens: 16
stop: "\n\n"
eos: false
timeout_s: 30
plots: false
checks:
  greedy_equality: false
  first_token: {enabled: true, samples: 100, top_k: 5}
  sequence: {samples: 50, length: 4}
  significance: 0.05
  strategies: [speculative]
  inject_residual_bug: true
)",
                                  "full.yaml");
  EXPECT_EQ(c.name, "full");
  EXPECT_EQ(c.target.seed, 3u);
  EXPECT_EQ(c.target.threads, 1);
  ASSERT_TRUE(c.draft.has_value());
  EXPECT_EQ(c.draft->threads, 2);  // from models.threads
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[1].id, "second");
  EXPECT_TRUE(c.prompts[1].chat);
  EXPECT_EQ(c.prompts[1].category, "code");
  EXPECT_EQ(c.strategies[1].label, "spec-ngram");
  EXPECT_EQ(c.strategies[1].params.at("gamma"), "3");
  ASSERT_EQ(c.sweep.size(), 2u);
  EXPECT_EQ(c.sweep[0].key, "gamma");
  EXPECT_EQ(c.sweep[1].values, (std::vector<std::string>{"0", "0.7"}));
  EXPECT_EQ(c.stop, std::vector<std::string>{"\n\n"});
  EXPECT_FALSE(c.eos);
  EXPECT_EQ(c.checks.first_token_samples, 100);
  EXPECT_EQ(c.checks.first_token_top_k, 5);
  EXPECT_EQ(c.checks.sequence_samples, 50);
  EXPECT_EQ(c.checks.sequence_length, 4);
  EXPECT_TRUE(c.checks.inject_residual_bug);
}

TEST(HarnessConfig, ResolvedYamlRoundTrips) {
  const auto c = parse_experiment(with("sweep: {gamma: [1, 2]}\nstop: [\"x\"]\n"), "rt.yaml");
  const std::string y = to_yaml(c);
  const auto c2 = parse_experiment(y, "rt2.yaml");
  EXPECT_EQ(to_yaml(c2), y);  // the resolved config is a fixed point
  EXPECT_EQ(c2.prompts[0].text, "hello");
  EXPECT_EQ(c2.sweep[0].values, (std::vector<std::string>{"1", "2"}));
}

TEST(HarnessConfig, Overrides) {
  const auto c = parse_experiment(kMinimal, "o.yaml",
                                  {"max_new_tokens=9", "sweep.gamma=[2,4]", "checks.first_token.samples=77",
                                   "models.target=tiny-gpt2", "prompts[0]=bye"});
  EXPECT_EQ(c.max_new_tokens, 9);
  EXPECT_EQ(c.sweep[0].values, (std::vector<std::string>{"2", "4"}));
  EXPECT_EQ(c.checks.first_token_samples, 77);
  EXPECT_EQ(c.target.name, "tiny-gpt2");
  EXPECT_EQ(c.prompts[0].text, "bye");
  expect_error(kMinimal, {"--set", "no_equals"}, {"no_equals"});
  expect_error(kMinimal, {"--set", "prompts", "[5]"}, {"prompts[5]=x"});
  expect_error(kMinimal, {"exp.yaml", "max_new_tokens", "'many'"}, {"max_new_tokens=many"});
}

TEST(HarnessConfig, PromptsFromJsonl) {
  const auto dir = std::filesystem::temp_directory_path() / "specdec_test_prompts";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "p.jsonl");
    f << R"({"text": "one", "category": "code"})" << "\n\n" << R"({"text": "two", "chat": false, "id": 5})" << "\n";
  }
  const std::string y = "models: {target: tiny-llama}\nstrategies: [greedy]\nprompts: {file: p.jsonl, chat: true}\n";
  const auto c = parse_experiment(y, (dir / "exp.yaml").string());  // relative to the experiment file
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_TRUE(c.prompts[0].chat);   // default from prompts.chat
  EXPECT_FALSE(c.prompts[1].chat);  // the line's own flag wins
  EXPECT_EQ(c.prompts[0].category, "code");
  EXPECT_EQ(c.prompts[1].id, "5");
  {
    std::ofstream f(dir / "bad.jsonl");
    f << R"({"text": "ok"})" << "\n" << R"({"txt": "no"})" << "\n";
  }
  expect_error("models: {target: x}\nstrategies: [greedy]\nprompts: {file: " + (dir / "bad.jsonl").string() + "}\n",
               {"bad.jsonl", ":2", "\"text\""});
  {
    std::ofstream f(dir / "bad2.jsonl");
    f << "{not json\n";
  }
  expect_error("models: {target: x}\nstrategies: [greedy]\nprompts: {file: " + (dir / "bad2.jsonl").string() + "}\n",
               {"bad2.jsonl", ":1", "not valid JSON"});
  std::filesystem::remove_all(dir);
}

// A prompt's own constraint (json_schema, regex, grammar, response_format): parsed with the
// prompt, kept through the resolved YAML, and a bad value named by file, prompt and key.
TEST(HarnessConfig, PromptConstraints) {
  const auto c = parse_experiment(R"(
models: {target: tiny-llama}
strategies: [greedy]
prompts:
  - {text: a, regex: "[0-9]+"}
  - {text: b, json_schema: {type: object, properties: {n: {type: integer}}}}
  - {text: c, response_format: text}
  - d
)", "exp.yaml");
  ASSERT_EQ(c.prompts.size(), 4u);
  ASSERT_NE(c.prompts[0].constraint, nullptr);
  EXPECT_EQ(c.prompts[0].constraint->key(), "regex");
  ASSERT_NE(c.prompts[1].constraint, nullptr);
  EXPECT_EQ(c.prompts[1].constraint->key(), "json_schema");
  EXPECT_EQ(c.prompts[1].constraint_params.at("json_schema"),
            R"({"properties":{"n":{"type":"integer"}},"type":"object"})");
  EXPECT_EQ(c.prompts[2].constraint, nullptr);  // text: no constraint on this prompt ...
  EXPECT_EQ(c.prompts[2].constraint_params.size(), 1u);  // ... which still overrides the strategy's
  EXPECT_TRUE(c.prompts[3].constraint_params.empty());
  const auto again = parse_experiment(to_yaml(c), "resolved.yaml");
  EXPECT_EQ(again.prompts[0].constraint_params, c.prompts[0].constraint_params);
  EXPECT_EQ(again.prompts[1].constraint_params, c.prompts[1].constraint_params);

  expect_error("models: {target: x}\nstrategies: [greedy]\nprompts: [ok, {text: b, regex: \"a(\"}]\n",
               {"exp.yaml", "prompts[1]", "regex: malformed regular expression"});
  expect_error("models: {target: x}\nstrategies: [greedy]\nprompts: [{text: b, regex: a, grammar: 'root ::= \"a\"'}]\n",
               {"exp.yaml", "prompts[0]", "both 'regex' and 'grammar'"});
  const auto dir = std::filesystem::temp_directory_path() / "specdec_test_prompt_constraints";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "p.jsonl");
    f << R"({"text": "one", "regex": "x"})" << "\n" << R"({"text": "two", "json_schema": {"type": 12}})" << "\n"
      << R"({"text": "three", "regex": 7})" << "\n";
  }
  expect_error("models: {target: x}\nstrategies: [greedy]\nprompts: {file: " + (dir / "p.jsonl").string() + "}\n",
               {"p.jsonl:2: prompt 1: json_schema: malformed JSON schema"});
  {
    std::ofstream f(dir / "p.jsonl");
    f << R"({"text": "one", "regex": 7})" << "\n";
  }
  expect_error("models: {target: x}\nstrategies: [greedy]\nprompts: {file: " + (dir / "p.jsonl").string() + "}\n",
               {"p.jsonl:1: prompt 0: regex: expected a string, got 7"});
  std::filesystem::remove_all(dir);
}

TEST(HarnessConfig, ErrorsNameFileKeyAndValue) {
  expect_error("models: [unclosed", {"exp.yaml", "YAML syntax error"});
  expect_error("", {"exp.yaml", "empty"});
  expect_error(with("bogus: 1\n"), {"exp.yaml", "bogus", "unknown key", "valid keys", "max_new_tokens"});
  expect_error("prompts: [a]\nstrategies: [greedy]\n", {"exp.yaml", "models"});
  expect_error("models: {draft: x}\nprompts: [a]\nstrategies: [greedy]\n", {"models.target", "missing"});
  expect_error("models: {target: {name: x, dtype: fp8}}\nprompts: [a]\nstrategies: [greedy]\n",
               {"exp.yaml", "models.target.dtype", "fp8"});
  expect_error("models: {target: {dtype: float32}}\nprompts: [a]\nstrategies: [greedy]\n", {"models.target.name"});
  expect_error("models: {target: x, threads: many}\nprompts: [a]\nstrategies: [greedy]\n",
               {"models.threads", "'many'"});
  expect_error("models: {target: x, colour: red}\nprompts: [a]\nstrategies: [greedy]\n", {"models.colour"});
  expect_error("models: {target: x}\nstrategies: [greedy]\n", {"exp.yaml", "prompts", "missing"});
  expect_error("models: {target: x}\nprompts: []\nstrategies: [greedy]\n", {"prompts", "no prompts"});
  expect_error("models: {target: x}\nprompts: [a, {text: b, chat: maybe}]\nstrategies: [greedy]\n",
               {"prompts[1].chat", "'maybe'"});
  expect_error("models: {target: x}\nprompts: [a, {txt: b}]\nstrategies: [greedy]\n", {"prompts[1].txt", "unknown"});
  expect_error("models: {target: x}\nprompts: {file: nowhere.jsonl}\nstrategies: [greedy]\n",
               {"prompts.file", "nowhere.jsonl", "not found"});
  expect_error("models: {target: x}\nprompts: [a]\n", {"strategies", "missing"});
  expect_error("models: {target: x}\nprompts: [a]\nstrategies: greedy\n", {"strategies", "non-empty list"});
  expect_error("models: {target: x}\nprompts: [a]\nstrategies: [greedy, {label: y}]\n", {"strategies[1].name"});
  expect_error("models: {target: x}\nprompts: [a]\nstrategies: [greedy, greedy]\n",
               {"strategies[1].label", "duplicate", "'greedy'"});
  expect_error("models: {target: x}\nprompts: [a]\nstrategies: [{name: s, params: [1]}]\n",
               {"strategies[0].params", "mapping"});
  expect_error("models: {target: x}\nprompts: [a]\nstrategies: [{name: s, params: {gamma: [1]}}]\n",
               {"strategies[0].params.gamma", "[1]"});
  expect_error(with("sweep: [gamma]\n"), {"sweep", "mapping"});
  expect_error(with("sweep: {gamma: []}\n"), {"sweep.gamma", "empty"});
  expect_error(with("sweep: {gamma: [1, 1]}\n"), {"sweep.gamma", "duplicate", "'1'"});
  expect_error(with("repeats: 0\n"), {"repeats", "out of range"});
  expect_error(with("max_new_tokens: lots\n"), {"max_new_tokens", "'lots'"});
  expect_error(with("seed: -1\n"), {"seed", "out of range"});
  expect_error(with("stop: {a: 1}\n"), {"stop", "list of strings"});
  expect_error(with("name: a/b\n"), {"name", "'a/b'"});
  expect_error(with("checks: {greedy: true}\n"), {"checks.greedy", "unknown key"});
  expect_error(with("checks: {significance: 2}\n"), {"checks.significance", "out of range"});
  expect_error(with("checks: {first_token: {samples: 3}}\n"), {"checks.first_token.samples", "out of range"});
  expect_error(with("checks: {sequence: {length: x}}\n"), {"checks.sequence.length", "'x'"});
  expect_error(with("checks: {inject_residual_bug: sometimes}\n"), {"checks.inject_residual_bug", "'sometimes'"});
}
