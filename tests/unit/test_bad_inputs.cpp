// Bad inputs (issue 14): every hostile input must end in exit code 1 and a message naming the
// file, key and value -- never a crash (deep nesting), std::bad_alloc (huge sizes), silent
// junk (T = 1e-300, NaN logits) or a file written outside the output folder ("name: ..").
//
// The table below runs the CLI's commands on inputs generated at test time in a temp sandbox:
// crafted GGUF files (a working 1-layer llama with a byte-level tokenizer, and variants with bad
// metadata), Hugging Face directories with bad config.json / tokenizer.json, deeply nested
// JSONL / YAML, experiment YAMLs with bad names and values. Every case runs with the sandbox as
// working directory and --results-root inside it, and afterwards nothing may have appeared
// outside <sandbox>/work/results (nor in the repository's results/).
// A case runs in this process, through cli::dispatch (what the CLI's main() calls: the same exit
// code and the same text on stdout and stderr); one case of each kind of failure a user sees
// (each command, each stage that refuses: option parsing, a model's file, generation, an
// experiment, the results root; and success) also runs through the real binary (kThroughBinary),
// so that its exit code and message are checked too. This executable registers the worked
// examples of examples/ (tests/support/examples_main.cpp), so the binary is the CLI that carries
// them too, build/specdec_with_examples (examples/main.cpp: build/specdec's main() after the
// examples' registration). Starting the CLI took ~2 s a case under ASan (scripts/build.sh
// --sanitize), where all 173 cases now run.
// No weights needed: the models are tiny-llama and the crafted GGUF.
#include <gtest/gtest.h>

#include "tests/support/tiny_gguf.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "harness/experiment.h"
#include "model/tiny.h"
#include "sampling/processors.h"
#include "strategies/common.h"
#include "strategies/registry.h"
#include "tokenizer/byte_level.h"
#include "tests/support/cli_in_process.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::Output;
using specdec::testing_support::quote;
using specdec::testing_support::source_dir;

namespace fs = std::filesystem;

namespace {

const std::string kBin = binary_dir() + "/specdec_with_examples";  // the CLI + examples/

// ---- sandbox -----------------------------------------------------------------------------

const fs::path& sandbox() {
  static const fs::path root = fs::temp_directory_path() / ("specdec_bad_inputs_" + std::to_string(::getpid()));
  return root;
}
fs::path in_dir() { return sandbox() / "in"; }
fs::path work_dir() { return sandbox() / "work"; }
fs::path results_root() { return work_dir() / "results"; }
std::string in(const std::string& name) { return (in_dir() / name).string(); }

void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}
void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
  write_file(p, std::string(bytes.begin(), bytes.end()));
}

Output run_cli(const std::vector<std::string>& args) {
  return specdec::testing_support::shell("cd " + quote(work_dir().string()) + " && " +
                                         specdec::testing_support::command_line(kBin, args));
}

// The same command line through cli::dispatch in this process (tests/support/cli_in_process.h),
// with the work folder as the working directory.
Output run_in_process(const std::vector<std::string>& args) {
  return specdec::testing_support::run_in_process(args, work_dir());
}

// Every path under the sandbox except the results root, and the repository's results/ folders.
std::set<std::string> snapshot() {
  std::set<std::string> out;
  for (auto it = fs::recursive_directory_iterator(sandbox()); it != fs::recursive_directory_iterator(); ++it) {
    const std::string p = it->path().string();
    if (p.rfind(results_root().string(), 0) == 0) continue;
    out.insert(p);
  }
  const fs::path repo_results = fs::path(source_dir()) / "results";
  if (fs::is_directory(repo_results))
    for (const auto& e : fs::directory_iterator(repo_results)) out.insert(e.path().string());
  return out;
}

// ---- a crafted GGUF: 1-layer llama, d_model 8, byte-level vocabulary of 256 tokens --------
// (tests/support/tiny_gguf.h with this table's shape; the variants change only metadata or fills)

using GgufOptions = specdec::testing::TinyGgufOptions;

GgufOptions base_gguf() {
  GgufOptions o;
  o.n_layers = 1;
  o.d_model = 8;
  o.d_ff = 16;
  o.n_heads = 2;
  o.n_kv_heads = 2;
  o.layer_scale = 1;
  o.output_scale = 0;  // tied to token_embd
  return o;
}

std::vector<uint8_t> gguf(const GgufOptions& o = base_gguf()) { return specdec::testing::tiny_gguf(o); }

// ---- Hugging Face directories ---------------------------------------------------------------

const char* kLlamaConfig = R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-5, "max_position_embeddings": 512, "rope_theta": 10000.0})";

std::string with(std::string json, const std::string& key, const std::string& value) {
  auto j = nlohmann::json::parse(json);
  j[key] = nlohmann::json::parse(value);
  return j.dump();
}

// An HF directory whose safetensors file holds no tensors: config.json is checked first.
void hf_dir(const std::string& name, const std::string& config_json) {
  const fs::path d = in_dir() / name;
  write_file(d / "config.json", config_json);
  std::string st(8, '\0');
  st[0] = 2;
  write_file(d / "model.safetensors", st + "{}");
}

std::string deep(const std::string& open, const std::string& close, int n) {
  std::string s;
  s.reserve((open.size() + close.size()) * size_t(n));
  for (int i = 0; i < n; ++i) s += open;
  for (int i = 0; i < n; ++i) s += close;
  return s;
}

std::string tokenizer_json(const std::string& vocab, const std::string& merges = "[]",
                           const std::string& added = "[]") {
  return R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": )" + merges +
         R"(}, "added_tokens": )" + added + R"(, "pre_tokenizer": {"type": "ByteLevel"}})";
}

void tok_dir(const std::string& name, const std::string& json) { write_file(in_dir() / name / "tokenizer.json", json); }

// ---- experiments ------------------------------------------------------------------------------

std::string experiment(const std::string& extra, const std::string& name = "ok",
                       const std::string& strategies = "[{name: greedy}]", const std::string& prompts = "[\"hello\"]") {
  std::string y;
  if (!name.empty()) y += "name: " + name + "\n";
  y += "models: {target: tiny-llama}\nprompts: " + prompts + "\nstrategies: " + strategies +
       "\nmax_new_tokens: 4\nrepeats: 1\nwarmup: 0\nplots: false\n" + extra;
  return y;
}

const int kDeep = 300000;  // the nesting that overflowed the stack

void make_inputs() {
  fs::remove_all(sandbox());
  fs::create_directories(in_dir());
  fs::create_directories(results_root());

  // GGUF files
  write_file(in_dir() / "good.gguf", gguf());
  write_file(in_dir() / "bad.gbnf", std::string("root ::= \"a\"\nfoo ::= bar\n"));  // structured output
  {
    GgufOptions o = base_gguf();
    o.chat = true;  // an end id (<|im_end|>), which a grammar ends with
    write_file(in_dir() / "chat.gguf", gguf(o));
  }
  write_file(in_dir() / "empty.gguf", std::string());
  {
    auto b = gguf();
    b.resize(b.size() / 2);
    write_file(in_dir() / "truncated.gguf", b);
  }
  {
    auto b = gguf();
    b[0] = 'X';
    write_file(in_dir() / "magic.gguf", b);
  }
  auto variant = [](const std::string& name, std::function<void(GgufOptions&)> f) {
    GgufOptions o = base_gguf();
    f(o);
    write_file(in_dir() / name, gguf(o));
  };
  variant("blocks_huge.gguf", [](GgufOptions& o) { o.block_count = 0xFFFFFFFFu; });
  variant("blocks_missing.gguf", [](GgufOptions& o) { o.block_count = 3; });
  variant("eps_nan.gguf", [](GgufOptions& o) { o.rms_eps = NAN; });
  variant("eps_neg.gguf", [](GgufOptions& o) { o.rms_eps = -1e-5f; });
  variant("rope_zero.gguf", [](GgufOptions& o) { o.rope_base = 0; });
  variant("rope_inf.gguf", [](GgufOptions& o) { o.rope_base = INFINITY; });
  variant("heads_zero.gguf", [](GgufOptions& o) { o.head_count = o.head_count_kv = 0; });
  variant("embd_mismatch.gguf", [](GgufOptions& o) { o.embedding_length = 16; });
  variant("nan_weights.gguf", [](GgufOptions& o) { o.output_norm_value = NAN; });
  variant("inf_weights.gguf", [](GgufOptions& o) { o.output_norm_value = INFINITY; });
  variant("bos_outside.gguf", [](GgufOptions& o) { o.bos_id = 1000000; });
  variant("string_len.gguf", [](GgufOptions& o) { o.huge_string_len = 1ull << 62; });
  variant("tokens_not_strings.gguf", [](GgufOptions& o) { o.vocab_type = 4; });
  fs::create_directories(in_dir() / "dir.gguf");

  // Hugging Face directories
  hf_dir("hf_layers", with(kLlamaConfig, "num_hidden_layers", "2000000000"));
  hf_dir("hf_vocab", with(kLlamaConfig, "vocab_size", "1073741824"));
  hf_dir("hf_dmodel", with(kLlamaConfig, "hidden_size", "1000000000"));
  hf_dir("hf_eps_neg", with(kLlamaConfig, "rms_norm_eps", "-1"));
  hf_dir("hf_eps_str", with(kLlamaConfig, "rms_norm_eps", "\"1e-5\""));
  hf_dir("hf_rope_zero", with(kLlamaConfig, "rope_theta", "0"));
  hf_dir("hf_kv_heads", with(kLlamaConfig, "num_key_value_heads", "3"));
  hf_dir("hf_arch", with(kLlamaConfig, "model_type", "\"bert\""));
  hf_dir("hf_array", "[1, 2]");
  hf_dir("hf_deep", "{\"model_type\": " + deep("[", "]", kDeep) + "}");
  hf_dir("hf_layers_missing", with(kLlamaConfig, "num_hidden_layers", "2"));
  fs::create_directories(in_dir() / "hf_empty_dir");

  // tokenizer.json variants (specdec tokenize reads only the tokenizer)
  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  tok_dir("tok_deep_vocab", tokenizer_json(R"({"a": )" + deep("[", "]", kDeep) + "}"));
  tok_dir("tok_deep_merges", tokenizer_json(vocab, "[" + deep("[", "]", kDeep) + "]"));
  tok_dir("tok_big_id", tokenizer_json(R"({"a": 1073741823, "b": 1})"));
  tok_dir("tok_neg_id", tokenizer_json(R"({"a": -1, "b": 1})"));
  tok_dir("tok_added_id", tokenizer_json(vocab, "[]", R"([{"id": 1099511627776, "content": "<x>"}])"));
  tok_dir("tok_empty", "");
  tok_dir("tok_merge_unknown", tokenizer_json(vocab, R"([["a", "zz"]])"));

  // prompts JSONL
  write_file(in_dir() / "deep.jsonl", "{\"text\": " + deep("[", "]", kDeep) + "}\n");
  write_file(in_dir() / "deep_obj.jsonl", deep("{\"a\": ", "}", kDeep) + "\n");
  write_file(in_dir() / "broken.jsonl", "{\"text\": \"a\"}\n{\"text\": \n");
  write_file(in_dir() / "latin1.jsonl", std::string("{\"text\": \"caf\xe9\"}\n"));
  write_file(in_dir() / "id_obj.jsonl", "{\"text\": \"a\", \"id\": {\"x\": 1}}\n");
  fs::create_directories(in_dir() / "prompts_dir.jsonl");

  // experiments
  auto exp = [](const std::string& name, const std::string& text) { write_file(in_dir() / name, text); };
  exp("ok.yaml", experiment(""));
  exp("spec.yaml", experiment("", "spec", "[{name: speculative, params: {drafter: ngram}}]"));
  exp("empty.yaml", "");
  exp("syntax.yaml", "name: [unclosed\n");
  exp("deep_flow.yaml", "name: x\nmodels: " + deep("[", "]", kDeep) + "\n");
  {
    std::string block;  // "- - - x": a sequence in a sequence in ..., in block style
    for (int i = 0; i < kDeep; ++i) block += "- ";
    exp("deep_block.yaml", block + "x\n");
  }
  exp("deep_300.yaml", "name: x\nmodels: " + deep("[", "]", 300) + "\n");
  {
    std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 8; ++i) {
      laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
      for (int k = 0; k < 10; ++k) laughs += (k ? ", *a" : "*a") + std::to_string(i - 1);
      laughs += "]\n";
    }
    exp("laughs.yaml", laughs);
  }
  exp("name_dotdot.yaml", experiment("", ".."));
  exp("name_slash.yaml", experiment("", "a/b"));
  exp("name_abs.yaml", experiment("", "/tmp/specdec_escape"));
  exp("name_empty.yaml", experiment("", "''"));
  exp("...yaml", experiment("", ""));  // no name: the stem ".." would be used
  exp("prompts_deep.yaml", experiment("", "pd", "[greedy]", "{file: deep.jsonl}"));
  exp("prompts_deep_obj.yaml", experiment("", "pd", "[greedy]", "{file: deep_obj.jsonl}"));
  exp("prompts_broken.yaml", experiment("", "pb", "[greedy]", "{file: broken.jsonl}"));
  exp("prompts_latin1.yaml", experiment("", "pl", "[greedy]", "{file: latin1.jsonl}"));
  exp("prompts_idobj.yaml", experiment("", "pi", "[greedy]", "{file: id_obj.jsonl}"));
  exp("prompts_dir.yaml", experiment("", "pdir", "[greedy]", "{file: prompts_dir.jsonl}"));
  exp("prompts_missing.yaml", experiment("", "pm", "[greedy]", "{file: nonexistent.jsonl}"));
  exp("complex_key.yaml", experiment("? [a, b]\n: 1\n"));
  exp("unknown_key.yaml", experiment("colour: blue\n"));
  exp("strategy_unknown.yaml", experiment("", "su", "[nosuch]"));
  exp("strategy_list_bad.yaml", experiment("", "sl", "{greedy: 1}"));
  exp("gamma_huge.yaml", experiment("", "gh", "[{name: speculative, params: {drafter: ngram, gamma: 1000000000, "
                                              "gamma_max: 1000000000}}]"));
  // structured output: a grammar on a model without a tokenizer; beam with prompts saying only text
  exp("regex_no_tokenizer.yaml", experiment("", "rt", "[{name: greedy, params: {regex: 'a+'}}]"));
  exp("prompt_regex_no_tokenizer.yaml", experiment("", "pt", "[greedy]", "[{text: hi, regex: 'a+'}]"));
  exp("beam_text_prompt.yaml", experiment("", "bt", "[beam]", "[{text: hi, response_format: text}, hello]"));
  exp("beam_regex_prompt.yaml", experiment("", "br", "[beam]", "[{text: hi, regex: 'a+'}]"));
  exp("draft_missing.yaml",
      "name: dm\nmodels: {target: tiny-llama, draft: nosuch-model}\nprompts: [hi]\nstrategies: [greedy]\n");
  write_file(in_dir() / "catalog_deep.yaml", "models: " + deep("[", "]", kDeep) + "\n");
  write_file(in_dir() / "prompt_latin1.txt", std::string("caf\xe9 \xff\xfe na\xefve"));
  write_file(in_dir() / "prompt_long.txt", std::string(600, 'a'));
  fs::create_directories(in_dir() / "prompt_dir.txt");
}

// ---- the table ---------------------------------------------------------------------------------

struct Case {
  std::string name;               // test name
  std::vector<std::string> args;  // "{in}/" is replaced by the input folder
  std::string fragment;           // must appear in the output
  int code = 1;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  const std::vector<std::string> gen = {"generate", "--prompt", "hello", "--model"};
  auto g = [&](const std::string& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = gen;
    a.push_back(model);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto val = [](const std::string& file, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"validate", "{in}/" + file};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto runx = [](const std::string& file, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"run", "{in}/" + file, "--quiet", "--results-root", "results"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto set = [](const std::string& kv) { return std::vector<std::string>{"--set", kv}; };
  auto tok = [](const std::string& dir) {
    return std::vector<std::string>{"tokenize", "--model", "{in}/" + dir, "--text", "ab"};
  };
  const std::string good = "{in}/good.gguf";
  return {
      // ---- experiment files (validate / run) ----
      {"experiment_missing", val("nonexistent.yaml"), "cannot open experiment file"},
      {"experiment_is_directory", {"validate", "{in}/hf_empty_dir"}, "is a directory"},
      {"experiment_empty", val("empty.yaml"), "empty experiment file"},
      {"experiment_syntax", val("syntax.yaml"), "YAML syntax error"},
      {"yaml_deep_flow_300k", val("deep_flow.yaml"), "nested deeper than 256 levels"},
      {"yaml_deep_block_300k", val("deep_block.yaml"), "nested deeper than 256 levels"},
      {"yaml_deep_300", val("deep_300.yaml"), "deep_300.yaml: YAML nested deeper than 256"},
      {"yaml_billion_laughs", val("laughs.yaml"), "more than 1000000 YAML nodes"},
      {"yaml_complex_key", val("complex_key.yaml"), "keys must be strings"},
      {"yaml_unknown_key", val("unknown_key.yaml"), "unknown key 'colour'"},
      {"name_dotdot_validate", val("name_dotdot.yaml"), "name: '..' is not allowed"},
      {"name_dotdot_run", runx("name_dotdot.yaml"), "'..' is not allowed"},
      {"name_set_dotdot_run", runx("ok.yaml", set("name=..")), "'..' is not allowed"},
      {"name_slash_run", runx("name_slash.yaml"), "'a/b' may only contain"},
      {"name_absolute_run", runx("name_abs.yaml"), "'/tmp/specdec_escape' may only contain"},
      {"name_empty", val("name_empty.yaml"), "1 to 128 characters"},
      {"name_from_file_stem_dotdot", runx("...yaml"), "from the file name"},
      {"prompts_jsonl_deep_300k_validate", val("prompts_deep.yaml"), "deep.jsonl:1: JSON nested deeper than 256"},
      {"prompts_jsonl_deep_300k_run", runx("prompts_deep.yaml"), "deep.jsonl:1: JSON nested deeper than 256"},
      {"prompts_jsonl_deep_objects", val("prompts_deep_obj.yaml"), "deep_obj.jsonl:1: JSON nested deeper"},
      {"prompts_jsonl_broken_line", val("prompts_broken.yaml"), "broken.jsonl:2: not valid JSON"},
      {"prompts_jsonl_not_utf8", val("prompts_latin1.yaml"), "latin1.jsonl:1: not valid JSON"},
      {"prompts_jsonl_id_object", val("prompts_idobj.yaml"), "\"id\" must be a string or an integer"},
      {"prompts_file_is_directory", val("prompts_dir.yaml"), "is a directory"},
      {"prompts_file_missing", val("prompts_missing.yaml"), "file 'nonexistent.jsonl' not found"},
      {"set_without_equals", val("ok.yaml", set("repeats")), "expected key.path=value"},
      {"set_bad_index", val("ok.yaml", set("strategies[x].name=greedy")), "bad index in 'strategies[x]'"},
      {"set_huge_index", val("ok.yaml", set("strategies[99999999999999999999].name=a")), "bad index"},
      {"set_deep_value", val("ok.yaml", set("description=" + deep("[", "]", 30000))), "nested deeper than 256"},
      {"set_repeats_zero", val("ok.yaml", set("repeats=0")), "repeats: value 0 out of range [1, 1000]"},
      {"set_max_new_tokens_negative", val("ok.yaml", set("max_new_tokens=-5")), "max_new_tokens: value -5 out of range"},
      {"set_seed_negative", val("ok.yaml", set("seed=-1")), "seed: value -1 out of range"},
      {"set_seed_text", val("ok.yaml", set("seed=abc")), "seed: expected an integer, got 'abc'"},
      {"set_seed_float", val("ok.yaml", set("seed=1.5")), "seed: expected an integer, got '1.5'"},
      {"set_timeout_negative", val("ok.yaml", set("timeout_s=-1")), "timeout_s: value -1 out of range"},
      // batch_size (issue 15, item 5): range, sweep values, pinned params, and what batches cannot do
      {"batch_size_zero", val("ok.yaml", set("batch_size=0")), "batch_size: value 0 out of range [1, 1024]"},
      {"checks_batch_size_huge", val("ok.yaml", set("checks.batch_size=100000")), "checks.batch_size: value 100000 out of range [1, 1024]"},
      {"batch_size_sweep_text", val("ok.yaml", set("sweep.batch_size=[2, x]")), "sweep.batch_size: batch_size must be an integer in [1, 1024], got 'x'"},
      {"batch_size_param_negative", val("ok.yaml", set("strategies=[{name: greedy, params: {batch_size: -3}}]")), "strategies[0].params: batch_size must be an integer in [1, 1024], got '-3'"},
      {"batch_size_gpt2_run", runx("ok.yaml", {"--set", "models.target=tiny-gpt2", "--set", "batch_size=2"}), "batch_size 2 needs a target that takes ragged batches"},
      {"strategy_unknown", val("strategy_unknown.yaml"), "unknown strategy 'nosuch'; valid strategies"},
      {"strategies_not_a_list", val("strategy_list_bad.yaml"), "strategies: expected a non-empty list"},
      {"draft_model_unknown", val("draft_missing.yaml"), "unknown model 'nosuch-model'"},
      {"gamma_huge_validate", val("gamma_huge.yaml"), "exceeds the limit of 256"},
      {"gamma_huge_run", runx("gamma_huge.yaml"), "gamma_max=1000000000 (gamma=1000000000) exceeds the limit of 256"},
      {"gamma_above_gamma_max", val("spec.yaml", set("strategies[0].params.gamma=9")), "gamma=9 gamma_max=8"},
      {"drafter_unknown", val("spec.yaml", set("strategies[0].params.drafter=foo")), "unknown drafter 'foo' (parameter 'drafter'); valid values: auto, model, ngram, suffix"},
      {"drafter_model_without_draft", val("spec.yaml", set("strategies[0].params.drafter=model")), "strategy 'speculative' (drafter 'model') needs a draft model: set models.draft"},
      {"suffix_min_match_zero", val("spec.yaml", set("strategies[0].params.suffix_min_match=0")), "need 1 <= suffix_min_match <= suffix_max_match <= 1024, got suffix_min_match=0"},
      {"suffix_max_match_huge", val("spec.yaml", set("strategies[0].params.suffix_max_match=100000")), "suffix_max_match=100000"},
      {"suffix_min_above_max", val("spec.yaml", {"--set", "strategies[0].params.suffix_min_match=9", "--set", "strategies[0].params.suffix_max_match=4"}), "got suffix_min_match=9 suffix_max_match=4"},
      {"suffix_tree_width_zero", val("spec.yaml", set("strategies[0].params.suffix_tree_width=0")), "suffix_tree_width must be in [1, 16], got 0"},
      {"suffix_tree_width_huge", val("spec.yaml", set("strategies[0].params.suffix_tree_width=1000000")), "suffix_tree_width must be in [1, 16], got 1000000"},
      {"tree_branching_zero", val("spec.yaml", set("strategies[0].params.tree_branching=4,0,2")), "tree drafter: tree_branching = '4,0,2': entry '0' must be an integer in [1, 64]"},
      {"tree_branching_text", val("spec.yaml", set("strategies[0].params.tree_branching=wide")), "entry 'wide' must be an integer in [1, 64]"},
      {"tree_branching_too_many_nodes", val("spec.yaml", set("strategies[0].params.tree_branching=8,8,8")), "makes 584 nodes, more than the limit of 256"},
      {"recycle_k_zero", val("spec.yaml", set("strategies[0].params.recycle_k=0")), "drafter recycling: recycle_k must be in [1, 8], got 0"},
      {"recycle_k_huge", val("spec.yaml", set("strategies[0].params.recycle_k=151936")), "recycle_k must be in [1, 8], got 151936"},
      {"recycle_shape_text", val("spec.yaml", set("strategies[0].params.recycle_shape=4,wide")), "recycle_shape = '4,wide': entry 'wide' must be an integer in [1, 8]"},
      {"recycle_shape_above_k", val("spec.yaml", {"--set", "strategies[0].params.recycle_shape=4,2", "--set", "strategies[0].params.recycle_k=3"}), "entry '4' must be an integer in [1, 3]"},
      {"recycle_shape_too_many_nodes", val("spec.yaml", set("strategies[0].params.recycle_shape=8,8,8")), "recycle_shape = '8,8,8' makes 584 nodes, more than the limit of 256"},
      {"lookahead_ngram_one", val("spec.yaml", set("strategies[0].params.lookahead_ngram=1")), "drafter lookahead: lookahead_ngram must be in [2, 16], got 1"},
      {"lookahead_window_zero", val("spec.yaml", set("strategies[0].params.lookahead_window=0")), "lookahead_window must be in [1, 64], got 0"},
      {"lookahead_pool_huge", val("spec.yaml", set("strategies[0].params.lookahead_pool=1000000000")), "lookahead_pool must be in [1, 1024], got 1000000000"},
      {"lookahead_too_many_nodes", val("spec.yaml", {"--set", "strategies[0].params.lookahead_verify=64", "--set", "strategies[0].params.lookahead_ngram=8"}), "4 + 64 * 7 = 452 nodes, more than the limit of 256"},
      {"tree_budget_negative", val("spec.yaml", set("strategies[0].params.tree_budget=-3")), "tree_budget = '-3' must be auto, 0"},
      {"tree_budget_huge", val("spec.yaml", set("strategies[0].params.tree_budget=100000")), "a node count in [1, 256]"},
      {"tree_topk_zero", val("spec.yaml", set("strategies[0].params.tree_topk=0")), "tree_topk = 0 must be in [1, 16]"},
      {"skip_layers_negative", val("spec.yaml", set("strategies[0].params.skip_layers=3,-1")), "layer_skip: skip_layers = '3,-1': entry '-1' must be an integer in [0, 1023]"},
      {"skip_layers_text", val("spec.yaml", set("strategies[0].params.skip_layers=middle")), "entry 'middle' must be an integer in [0, 1023]"},
      {"skip_ratio_one", val("spec.yaml", set("strategies[0].params.skip_ratio=1")), "skip_ratio = 1 must be in [0, 1)"},
      {"skip_search_zero", val("spec.yaml", set("strategies[0].params.skip_search=0")), "skip_search = 0 must be in [1, 256]"},
      {"suffix_min_match_text", val("spec.yaml", set("strategies[0].params.suffix_min_match=two")), "'suffix_min_match': expected an integer, got 'two'"},
      {"repeat_min_run_zero", val("spec.yaml", set("strategies[0].params.repeat_min_run=0")), "repeat_min_run must be >= 1, got 0"},
      {"drafter_param_on_greedy", val("ok.yaml", set("strategies[0].params.ngram_max=4")), "unknown parameter 'ngram_max'"},
      {"adaptive_gamma_unknown", val("spec.yaml", set("strategies[0].params.adaptive_gamma=x")), "adaptive_gamma must be off, hf or cost"},
      {"controller_costs_missing", val("spec.yaml", {"--set", "strategies[0].params.adaptive_gamma=cost", "--set", "strategies[0].params.controller_costs=no_such_costs.json"}), "controller_costs: no_such_costs.json: cannot open"},
      {"drafters_with_drafter", val("spec.yaml", set("strategies[0].params.drafters=ngram,suffix")), "drafter (ngram) and drafters (ngram,suffix) exclude each other"},
      {"drafters_unknown", val("spec.yaml", {"--set", "strategies[0].params.adaptive_gamma=cost", "--set", "strategies[0].params.drafters=ngram,nope"}), "drafters 'ngram,nope': unknown drafter 'nope'"},
      {"drafters_list", val("spec.yaml", set("strategies[0].params.drafters=[ngram, suffix]")), "strategies[0].params.drafters: expected a string"},
      {"ngram_max_huge", val("spec.yaml", set("strategies[0].params.ngram_max=100000")), "ngram_max=100000"},
      {"param_unknown", val("ok.yaml", set("strategies[0].params.gamma=2")), "unknown parameter 'gamma'"},
      {"top_p_zero", val("ok.yaml", set("strategies[0].params.top_p=0")), "'top_p' must be in (0, 1], got 0"},
      {"top_p_above_one", val("ok.yaml", set("strategies[0].params.top_p=1.5")), "'top_p' must be in (0, 1], got 1.5"},
      {"top_k_negative", val("ok.yaml", set("strategies[0].params.top_k=-1")), "'top_k' must be >= 0, got -1"},
      {"min_p_above_one", val("ok.yaml", set("strategies[0].params.min_p=1.5")), "'min_p' must be in [0, 1], got 1.5"},
      {"min_p_negative", val("ok.yaml", set("strategies[0].params.min_p=-0.1")), "'min_p' must be in [0, 1]"},
      {"repetition_penalty_zero", val("ok.yaml", set("strategies[0].params.repetition_penalty=0")), "'repetition_penalty' must be > 0"},
      {"repetition_penalty_negative", val("ok.yaml", set("strategies[0].params.repetition_penalty=-2")), "'repetition_penalty' must be > 0"},
      {"temperature_negative", val("ok.yaml", set("strategies[0].params.temperature=-1")), "'temperature' must be >= 0, got -1"},
      {"temperature_nan", val("ok.yaml", set("strategies[0].params.temperature=nan")), "'temperature' must be >= 0, got nan"},
      {"temperature_text", val("ok.yaml", set("strategies[0].params.temperature=hot")), "expected a number, got 'hot'"},
      {"catalog_deep", {"models", "--catalog", "{in}/catalog_deep.yaml"}, "catalog_deep.yaml: YAML nested too deep"},
      {"models_dtype_without_load", {"models", "--dtype", "native"}, "--dtype and --threads apply to --load only"},
      // ---- generate on crafted GGUF files ----
      {"gguf_good_control", g(good, {"--max-new-tokens", "4"}), "[greedy] 4 tokens", 0},
      {"gguf_missing", g("{in}/nonexistent.gguf"), "unknown model '"},
      {"gguf_empty", g("{in}/empty.gguf"), "empty.gguf: file of 0 bytes is too small"},
      {"gguf_truncated", g("{in}/truncated.gguf"), "truncated.gguf"},
      {"gguf_bad_magic", g("{in}/magic.gguf"), "bad magic"},
      {"gguf_directory", g("{in}/dir.gguf"), "dir.gguf/config.json: cannot open"},
      {"gguf_block_count_2e32", g("{in}/blocks_huge.gguf"), "llama.block_count = 4294967295 is outside [1, 1024]"},
      {"gguf_block_count_vs_tensors", g("{in}/blocks_missing.gguf"), "llama.block_count = 3 but the file has tensors for 1 layers"},
      {"gguf_rms_eps_nan", g("{in}/eps_nan.gguf"), "llama.attention.layer_norm_rms_epsilon = nan must be finite and > 0"},
      {"gguf_rms_eps_negative", g("{in}/eps_neg.gguf"), "llama.attention.layer_norm_rms_epsilon = -1e-05 must be finite and > 0"},
      {"gguf_rope_theta_zero", g("{in}/rope_zero.gguf"), "llama.rope.freq_base = 0 must be finite and > 0"},
      {"gguf_rope_theta_inf", g("{in}/rope_inf.gguf"), "llama.rope.freq_base = inf must be finite and > 0"},
      {"gguf_head_count_zero", g("{in}/heads_zero.gguf"), "attention.head_count"},
      {"gguf_embedding_length_mismatch", g("{in}/embd_mismatch.gguf"), "token_embd.weight has 8 columns but llama.embedding_length = 16"},
      {"gguf_nan_weights_logits", g("{in}/nan_weights.gguf"), "non-finite logits: nan for vocabulary entry 0 at position 4 (token id "},
      {"gguf_inf_weights_logits", g("{in}/inf_weights.gguf"), "non-finite logits"},
      {"gguf_nan_weights_sampling", g("{in}/nan_weights.gguf", {"--strategy", "sampling"}), "non-finite logits"},
      {"gguf_nan_weights_beam", g("{in}/nan_weights.gguf", {"--strategy", "beam"}), "non-finite logits"},
      {"gguf_nan_weights_speculative", g("{in}/nan_weights.gguf", {"--strategy", "speculative", "--set", "drafter=ngram"}), "non-finite logits"},
      // A draft model whose logits are NaN, its chain kept on the device until the verdict: named at the draft's step.
      {"gguf_nan_draft_greedy", g(good, {"--strategy", "speculative", "--draft", "{in}/nan_weights.gguf", "--set", "drafter=model"}), "non-finite logits"},
      {"gguf_nan_draft_sampling", g(good, {"--strategy", "speculative", "--draft", "{in}/nan_weights.gguf", "--set", "drafter=model", "--set", "temperature=0.8"}), "non-finite logits"},
      {"gguf_bos_outside_vocab", g("{in}/bos_outside.gguf"), "tokenizer.ggml.bos_token_id = 1000000 is outside the vocabulary"},
      {"gguf_string_length_huge", g("{in}/string_len.gguf"), "runs past the end of the file"},
      {"gguf_tokens_not_strings", g("{in}/tokens_not_strings.gguf"), "tokenizer.ggml.tokens' is not an array of strings"},
      {"generate_max_new_tokens_negative", g(good, {"--max-new-tokens", "-1"}), "max_new_tokens must be >= 0, got -1"},
      {"generate_prompt_beyond_context", {"generate", "--model", good, "--prompt-file", "{in}/prompt_long.txt"}, "prompt (600 tokens) + max_new_tokens (128) exceeds the model context of 512 tokens"},
      {"generate_max_new_beyond_context", g(good, {"--max-new-tokens", "1000000000"}), "max_new_tokens (1000000000) exceeds the model context of 512"},
      {"generate_prompt_not_utf8", {"generate", "--model", good, "--max-new-tokens", "3", "--prompt-file", "{in}/prompt_latin1.txt", "--json"}, "\"n_generated\":3", 0},
      {"generate_prompt_file_missing", {"generate", "--model", good, "--prompt-file", "{in}/nonexistent.txt"}, "cannot read prompt file"},
      {"generate_prompt_file_is_dir", {"generate", "--model", good, "--prompt-file", "{in}"}, "is a directory, not a file"},
      {"generate_seed_negative", {"generate", "--model", good, "--prompt", "hello", "--seed", "-1"}, "--seed must be >= 0, got -1"},
      {"generate_strategy_unknown", g(good, {"--strategy", "nosuch"}), "unknown strategy 'nosuch'"},
      {"generate_gamma_1e9", g(good, {"--strategy", "speculative", "--set", "gamma=1000000000", "--set", "gamma_max=1000000000"}), "exceeds the limit of 256"},
      {"generate_gamma_negative", g(good, {"--strategy", "speculative", "--set", "gamma=-1"}), "need 0 <= gamma <= gamma_max"},
      {"generate_set_without_equals", g(good, {"--set", "temperature"}), "--set expects key=value"},
      {"generate_top_p_zero", g(good, {"--strategy", "sampling", "--set", "top_p=0"}), "'top_p' must be in (0, 1]"},
      {"generate_seed_text", g(good, {"--seed", "abc"}), "seed"},
      {"generate_drafter_unknown", g(good, {"--strategy", "speculative", "--set", "drafter=oracle"}), "unknown drafter 'oracle' (parameter 'drafter'); valid values: auto, model, ngram, suffix"},
      {"generate_drafter_model_without_draft", g(good, {"--strategy", "speculative", "--set", "drafter=model"}), "strategy 'speculative' with drafter 'model' needs --draft"},
      {"generate_suffix_max_match_huge", g(good, {"--strategy", "speculative", "--set", "drafter=suffix", "--set", "suffix_max_match=1000000000"}), "suffix_max_match=1000000000"},
      {"generate_skip_layers_beyond_model", g(good, {"--strategy", "speculative", "--set", "drafter=layer_skip", "--set", "skip_layers=99"}), "entry '99' must be an integer in [0, 0]"},
      {"generate_skip_every_layer", g(good, {"--strategy", "speculative", "--set", "drafter=layer_skip", "--set", "skip_layers=0"}), "skips every layer"},
      // structured output (issue 57): the key (and the file), xgrammar's message without its own
      // "[time] /path/file.cc:N: " prefix (the key is followed by the message itself), its line and column
      {"generate_regex_malformed", g(good, {"--regex", "(ab"}), "error: regex: malformed regular expression: Regex parsing error at position 4: The parenthesis is not closed."},
      {"generate_grammar_file_malformed", g(good, {"--grammar", "{in}/bad.gbnf"}), "error: grammar: file '{in}/bad.gbnf': malformed grammar: EBNF parser error at line 2, column 9: Rule \"bar\" is not defined"},
      {"generate_json_schema_not_json", g(good, {"--json-schema", "{\"type\":"}), "error: json_schema: malformed JSON schema (not JSON, or not a schema xgrammar takes): Failed to parse JSON: syntax error at line 1"},
      {"generate_regex_empty_language", g(good, {"--regex", "[^\\s\\S]"}), "error: regex: the regular expression matches nothing"},
      {"generate_grammar_empty_language", g(good, {"--strategy", "speculative", "--set", "drafter=ngram", "--grammar", "root ::= [^\\x00-\\U0010FFFF]"}), "error: grammar: the grammar matches nothing"},
      {"experiment_regex_malformed", val("ok.yaml", set("strategies=[{name: greedy, params: {regex: '(ab'}}]")), "regex: malformed regular expression: Regex parsing error at position 4"},
      // a tokenizer the grammar cannot be compiled for: none at all, or no end id to end it with
      {"experiment_regex_no_tokenizer", val("regex_no_tokenizer.yaml"), "regex_no_tokenizer.yaml: strategies[0].params: regex: cannot compile the grammar for this model: tiny-llama has no tokenizer"},
      {"experiment_prompt_regex_no_tokenizer", runx("prompt_regex_no_tokenizer.yaml"), "prompt_regex_no_tokenizer.yaml: prompt p0: regex: cannot compile the grammar for this model: tiny-llama has no tokenizer"},
      {"generate_regex_no_end_id", g(good, {"--regex", "[a-z]+"}), "error: regex: cannot compile the grammar for this model: no end-of-sequence id to end it with"},
      // beam takes no constraint; response_format: text is none
      {"experiment_beam_regex_prompt", val("beam_regex_prompt.yaml"), "strategies[0]: strategy 'beam' takes no structured output, but prompt p0 sets regex"},
      {"experiment_beam_text_prompt_runs", runx("beam_text_prompt.yaml"), "", 0},
      // a structure cut by max_new_tokens finishes with `length`
      {"generate_regex_cut_by_length", g("{in}/chat.gguf", {"--regex", "[a-z]{20}", "--max-new-tokens", "3"}), "3 tokens (length)", 0},
      {"generate_regex_cut_by_length_speculative", g("{in}/chat.gguf", {"--strategy", "speculative", "--set", "drafter=ngram", "--regex", "[a-z]{20}", "--max-new-tokens", "3"}), "3 tokens (length)", 0},
      {"generate_lookahead_verify_negative", g(good, {"--strategy", "speculative", "--set", "drafter=lookahead", "--set", "lookahead_verify=-1"}), "lookahead_verify must be in [0, 64], got -1"},
      {"generate_recycle_shape_empty", g(good, {"--strategy", "speculative", "--set", "drafter=recycling", "--set", "recycle_shape="}), "recycle_shape = '' is empty"},
      {"generate_drafter_recycling_control", g(good, {"--strategy", "speculative", "--set", "drafter=recycling", "--max-new-tokens", "4"}), "[speculative] 4 tokens", 0},
      {"generate_drafter_lookahead_control", g(good, {"--strategy", "speculative", "--set", "drafter=lookahead", "--max-new-tokens", "4"}), "[speculative] 4 tokens", 0},
      {"generate_tree_without_draft", g(good, {"--strategy", "speculative", "--set", "drafter=tree"}), "drafter 'tree' needs --draft"},
      {"generate_annealed_t_start_negative", g(good, {"--strategy", "annealed", "--set", "t_start=-1"}), "annealed: t_start and t_end must be >= 0, got t_start=-1"},
      {"generate_annealed_control", g(good, {"--strategy", "annealed", "--max-new-tokens", "4"}), "[annealed] 4 tokens", 0},
      {"generate_drafter_suffix_control", g(good, {"--strategy", "speculative", "--set", "drafter=suffix", "--max-new-tokens", "4"}), "[speculative] 4 tokens", 0},
      {"generate_drafter_repeat_last_control", g(good, {"--strategy", "speculative", "--set", "drafter=repeat_last", "--max-new-tokens", "4"}), "[speculative] 4 tokens", 0},
      {"strategies_name_unknown", {"strategies", "--name", "nosuch"}, "unknown strategy 'nosuch'; valid strategies: greedy, sampling, beam, speculative, annealed; valid drafters: model, ngram, suffix"},
      {"generate_tiny_no_tokenizer", g("tiny-llama"), "has no tokenizer"},
      // ---- Hugging Face directories ----
      {"hf_config_missing", g("{in}/hf_empty_dir"), "hf_empty_dir/config.json: cannot open"},
      {"hf_layers_2e9", g("{in}/hf_layers"), "num_hidden_layers = 2000000000 is outside [1, 1024]"},
      {"hf_vocab_2e30", g("{in}/hf_vocab"), "vocab_size = 1073741824 is outside [1, 4194304]"},
      {"hf_hidden_size_1e9", g("{in}/hf_dmodel"), "hidden_size = 1000000000 is outside"},
      {"hf_rms_eps_negative", g("{in}/hf_eps_neg"), "rms_norm_eps = -1 must be finite and > 0"},
      {"hf_rms_eps_string", g("{in}/hf_eps_str"), "key 'rms_norm_eps' must be a number, got \"1e-5\""},
      {"hf_rope_theta_zero", g("{in}/hf_rope_zero"), "rope_theta = 0 must be finite and > 0"},
      {"hf_kv_heads_above_heads", g("{in}/hf_kv_heads"), "num_key_value_heads = 3 is outside [1, 2]"},
      {"hf_model_type_unknown", g("{in}/hf_arch"), "model_type 'bert' is not supported"},
      {"hf_config_not_object", g("{in}/hf_array"), "expected a JSON object"},
      {"hf_config_deep_300k", g("{in}/hf_deep"), "config.json: JSON nested deeper than 256 levels"},
      {"hf_layers_vs_tensors", g("{in}/hf_layers_missing"), "num_hidden_layers = 2 but"},
      // ---- tokenizer.json ----
      {"tokenizer_vocab_deep_300k", tok("tok_deep_vocab"), "tokenizer.json: JSON nested deeper than 256 levels"},
      {"tokenizer_merges_deep_300k", tok("tok_deep_merges"), "tokenizer.json: JSON nested deeper than 256 levels"},
      {"tokenizer_vocab_id_2e30", tok("tok_big_id"), "['a']' has id 1073741823, outside [0, 2)"},
      {"tokenizer_vocab_id_negative", tok("tok_neg_id"), "['a']' has id -1"},
      {"tokenizer_added_id_2e40", tok("tok_added_id"), "added_tokens[0].id' = 1099511627776 is outside"},
      {"tokenizer_empty_file", tok("tok_empty"), "tokenizer.json: invalid JSON"},
      {"tokenizer_merge_unknown_token", tok("tok_merge_unknown"), "not in the vocabulary"},
      {"tokenizer_dir_missing_file", tok("hf_empty_dir"), "tokenizer.json: cannot open"},
      {"tokenize_tiny_model", {"tokenize", "--model", "tiny-llama", "--text", "x"}, "without a tokenizer"},
      // ---- compare ----
      {"compare_missing_runs", {"compare", "{in}/no_run_a", "{in}/no_run_b"}, "no_run_a"},
  };
}

// The cases that also run through the binary (kBin): one for each kind of failure a user sees.
const std::set<std::string> kThroughBinary = {
    "yaml_deep_flow_300k",          // validate: an experiment file (and a deep parse in the binary's stack)
    "name_dotdot_run",              // run: a results folder outside the results root
    "generate_seed_text",           // generate: option parsing (boost::program_options)
    "gguf_block_count_2e32",        // generate: a GGUF file's metadata
    "hf_config_deep_300k",          // generate: a Hugging Face directory's config.json
    "gguf_nan_weights_logits",      // generate: an error during generation
    "gguf_good_control",            // generate: success, the stats line
    "generate_prompt_not_utf8",     // generate: success, --json on stdout
    "tokenizer_vocab_deep_300k",    // tokenize: a tokenizer.json
    "catalog_deep",                 // models: a catalog file
    "strategies_name_unknown",      // strategies
    "compare_missing_runs",         // compare
};

std::string expand(std::string a) {
  const std::string key = "{in}";
  for (size_t p; (p = a.find(key)) != std::string::npos;) a.replace(p, key.size(), in_dir().string());
  return a;
}

class BadInputs : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { make_inputs(); }
  static void TearDownTestSuite() {
    if (!std::getenv("SPECDEC_KEEP_BAD_INPUTS")) fs::remove_all(sandbox());  // keep it for debugging
  }
};

// Case c run by `run` (run_cli or run_in_process): its exit code, its message, and nothing
// written outside the results root.
void expect_case(const Case& c, const std::function<Output(const std::vector<std::string>&)>& run,
                 const std::string& how) {
  std::vector<std::string> args;
  for (const auto& a : c.args) args.push_back(expand(a));
  const auto before = snapshot();
  const Output o = run(args);
  const auto after = snapshot();
  if (std::getenv("SPECDEC_BAD_INPUTS_VERBOSE")) std::cout << how << " [" << o.code << "] " << o.text.substr(0, 600);
  EXPECT_EQ(o.code, c.code) << how << "\n" << o.text.substr(0, 2000);
  EXPECT_NE(o.text.find(expand(c.fragment)), std::string::npos)
      << how << ": expected '" << c.fragment << "' in:\n" << o.text.substr(0, 2000);
  EXPECT_EQ(o.text.find("bad_alloc"), std::string::npos) << how << "\n" << o.text.substr(0, 2000);
  if (c.code == 1) {
    EXPECT_NE(o.text.find("error"), std::string::npos) << how << "\n" << o.text.substr(0, 2000);
    EXPECT_LT(o.text.size(), 20000u) << how << ": the message should be short, not echo the input";
  }
  for (const auto& p : after)
    EXPECT_TRUE(before.count(p)) << how << ": written outside the results root: " << p;
}

TEST_P(BadInputs, ExitCodeAndMessage) {
  const Case& c = GetParam();
  expect_case(c, run_in_process, "in-process");
  if (kThroughBinary.count(c.name)) expect_case(c, run_cli, "build/specdec_with_examples");
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputs, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The table really is a table: at least 40 distinct cases; the binary runs cases of it.
TEST(BadInputsTable, HasManyDistinctCases) {
  std::set<std::string> names;
  for (const auto& c : cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  EXPECT_GE(names.size(), 40u);
  for (const auto& n : kThroughBinary) EXPECT_TRUE(names.count(n)) << n << " (kThroughBinary) is not in the table";
}

// ---- temperature: below k_min_temperature it is greedy, exactly -------------------------------

TEST(TinyTemperature, IsGreedyBelowThreshold) {
  specdec::sampling::ProcessorConfig c;
  for (double t : {0.0, 1e-300, 1e-30, 1e-6}) {
    c.temperature = t;
    EXPECT_TRUE(c.greedy()) << t;
  }
  for (double t : {1e-4, 0.7, 1.0}) {
    c.temperature = t;
    EXPECT_FALSE(c.greedy()) << t;
  }
  // probabilities() at T = 1e-300: a one-hot row at the argmax, no NaN.
  at::Tensor logits = at::tensor({1.0f, 3.0f, -2.0f, 2.999f}).unsqueeze(0);
  c.temperature = 1e-300;
  at::Tensor p = specdec::sampling::probabilities(logits, c, {});
  EXPECT_TRUE(at::isfinite(p).all().item<bool>());
  EXPECT_FLOAT_EQ(p[0][1].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(p.sum().item<float>(), 1.0f);
}

specdec::Tokens generate_tokens(const std::string& strategy, std::map<std::string, std::string> params,
                                uint64_t seed) {
  namespace st = specdec::strategies;
  auto model = specdec::model::make_tiny_llama(specdec::model::tiny_llama_config(), 0);
  st::Params p;
  for (const auto& [k, v] : params) p.set(k, v);
  auto s = st::create(strategy, p);
  st::Request req;
  req.target = model;
  req.prompt = {1, 5, 9, 3};
  req.stop.max_new_tokens = 24;
  req.seed = seed;
  return s->generate(req, [](const specdec::Tokens&, const std::string&) {}).tokens;
}

TEST(TinyTemperature, T1em300GivesTheGreedyTokens) {
  const auto greedy = generate_tokens("greedy", {}, 0);
  ASSERT_EQ(greedy.size(), 24u);
  for (uint64_t seed : {0, 1, 2}) {
    EXPECT_EQ(generate_tokens("sampling", {{"temperature", "1e-300"}}, seed), greedy) << seed;
    EXPECT_EQ(generate_tokens("speculative", {{"temperature", "1e-300"}, {"drafter", "ngram"}}, seed), greedy);
  }
  EXPECT_EQ(generate_tokens("sampling", {{"temperature", "1e-300"}, {"top_k", "5"}, {"top_p", "0.9"}}, 3), greedy);
}

// The CLI on the crafted GGUF (cli::dispatch in-process, as a user's command line): greedy and
// temperature=1e-300 print the same tokens.
TEST(BadInputsCli, TemperatureTinyEqualsGreedy) {
  make_inputs();
  auto tokens_of = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate", "--model", in("good.gguf"), "--prompt", "hello", "--max-new-tokens",
                                  "16", "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const Output o = run_in_process(a);
    EXPECT_EQ(o.code, 0) << o.text;
    const auto brace = o.text.rfind("\n{");
    return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1))["tokens"];
  };
  const auto greedy = tokens_of({});
  EXPECT_EQ(greedy.size(), 16u);
  EXPECT_EQ(tokens_of({"--strategy", "sampling", "--set", "temperature=1e-300", "--seed", "5"}), greedy);
  EXPECT_EQ(tokens_of({"--strategy", "speculative", "--set", "drafter=ngram", "--set", "temperature=1e-300"}), greedy);
  fs::remove_all(sandbox());
}

// The extensions of docs/adding.md on the CLI, as a user runs them (cli::dispatch in-process; no
// weights: the crafted GGUF): greedy speculative decoding with the example drafter and the suffix
// drafter prints the tokens of greedy decoding; `specdec strategies` lists the drafters with
// their parameters.
TEST(BadInputsCli, RegisteredDraftersEqualGreedy) {
  make_inputs();
  auto tokens_of = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate", "--model", in("good.gguf"), "--prompt", "ab ab ab ab", "--max-new-tokens",
                                  "16", "--json", "--set", "temperature=0"};
    a.insert(a.end(), extra.begin(), extra.end());
    const Output o = run_in_process(a);
    EXPECT_EQ(o.code, 0) << o.text;
    const auto brace = o.text.rfind("\n{");
    return nlohmann::json::parse(o.text.substr(brace == std::string::npos ? 0 : brace + 1))["tokens"];
  };
  const auto greedy = tokens_of({});
  EXPECT_EQ(greedy.size(), 16u);
  for (const char* drafter : {"repeat_last", "suffix", "ngram"})
    EXPECT_EQ(tokens_of({"--strategy", "speculative", "--set", std::string("drafter=") + drafter}), greedy) << drafter;
  EXPECT_EQ(tokens_of({"--strategy", "speculative", "--set", "drafter=repeat_last", "--set", "repeat_min_run=1"}), greedy);
  const Output list = run_in_process({"strategies"});
  EXPECT_EQ(list.code, 0);
  for (const char* s : {"annealed", "repeat_last", "repeat_min_run=2", "suffix_max_match=32", "model (needs --draft)"})
    EXPECT_NE(list.text.find(s), std::string::npos) << s << " missing in:\n" << list.text;
  fs::remove_all(sandbox());
}

// ---- non-finite logits are caught at the step, naming the position ------------------------------

TEST(FiniteLogits, NamesPositionAndToken) {
  auto model = specdec::model::make_tiny_llama(specdec::model::tiny_llama_config(), 0);
  at::Tensor logits = at::zeros({3, 32});
  const specdec::TokenId ids[3] = {4, 7, 9};
  EXPECT_NO_THROW(specdec::strategies::check_finite_logits(logits, *model, ids, 10));
  logits[1][5] = NAN;
  try {
    specdec::strategies::check_finite_logits(logits, *model, ids, 10);
    FAIL() << "no error";
  } catch (const specdec::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nan for vocabulary entry 5 at position 11"), std::string::npos) << m;
    EXPECT_NE(m.find("token id 7"), std::string::npos) << m;
  }
  logits[1][5] = 0;
  logits[2][31] = -INFINITY;
  EXPECT_THROW(specdec::strategies::check_finite_logits(logits, *model, ids, 10), specdec::Error);
}

// ---- experiment names stay inside the results root ------------------------------------------------

TEST(ExperimentName, OnlySafeFolderNames) {
  using specdec::harness::check_experiment_name;
  for (const char* ok : {"quickstart", "qwen_coder_sps", "a.b-c_1", "...", ".hidden"})
    EXPECT_NO_THROW(check_experiment_name(ok, "t")) << ok;
  for (const char* bad : {"", ".", "..", "a/b", "/abs", "../x", "a\\b", "x y", "a\nb"})
    EXPECT_THROW(check_experiment_name(bad, "t"), specdec::Error) << bad;
  EXPECT_THROW(check_experiment_name(std::string(129, 'a'), "t"), specdec::Error);
}

}  // namespace
