#pragma once
// Experiment YAML -> typed, validated ExperimentConfig (DESIGN principle 4).
// This header carries no yaml-cpp type: the YAML tree lives only in experiment.cpp.
// Every parse error is a specdec::Error naming the file, the key path
// (e.g. "strategies[2].params.gamma") and the bad value. The schema with every key and
// its default is documented in configs/README.md.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model_options.h"

namespace specdec::sampling { class Constraint; }

namespace specdec::harness {

// models.target / models.draft: the model's options (model_options.h: the keys dtype, threads,
// seed, device, engine and graphs, with its defaults; threads 2) and which model.
// threads_oversubscribe is no key: the runner sets it from `specdec run --threads-oversubscribe`.
struct ModelChoice : model::ModelOptions {
  std::string name;               // catalog name, .gguf path, HF dir, or "tiny-llama"
};

struct PromptItem {
  std::string id;                 // "p0", "p1", ... or the JSONL "id" / "question_id" field
  std::string text;               // the first user turn
  // Later user turns (Spec-Bench's MT-bench questions have a second turn). Each is asked after
  // the model's own answer to the previous turn, through the chat template; every turn is
  // timed and counted. Needs chat: true.
  std::vector<std::string> follow_ups;
  bool chat = false;              // wrap in the tokenizer's chat template
  std::string category = "default";  // what the report groups by (Spec-Bench: one of its six groups)
  std::string subcategory;        // the file's own category when `groups` mapped it to `category`
  // Structured output for this prompt alone, as written: the keys json_schema, regex, grammar
  // and response_format of the strategies' params. Set, it replaces every strategy's own
  // constraint on this prompt (response_format: text: none); empty: the strategy's applies.
  std::map<std::string, std::string> constraint_params;
  std::shared_ptr<const sampling::Constraint> constraint;  // parsed from constraint_params; null: none
};

struct StrategyEntry {
  std::string name;                           // registry name
  std::string label;                          // unique display name (default: name)
  std::map<std::string, std::string> params;  // pinned params; sweep values do not override
  // Also write a trace of each of its cells (`specdec trace`'s page and JSON) to the run
  // folder's traces/: one more, untimed generation on the first prompt (its first turn).
  bool trace = false;
};

struct SweepAxis {
  std::string key;                  // a strategy or processor parameter name
  std::vector<std::string> values;  // as text, parsed by the strategy's schema
};

struct ChecksConfig {
  bool greedy_equality = true;        // temperature-0 candidates vs greedy baseline, token-exact
  bool first_token = true;            // goodness of fit of the first token vs the exact target p
  int64_t first_token_samples = 400;  // N generations per checked cell
  int64_t first_token_top_k = 10;     // bins: top-k tokens of p + "other"
  bool sequence = true;               // two-sample test baseline vs candidate over L positions
  int64_t sequence_samples = 100;     // N generations per side
  int64_t sequence_length = 6;        // L
  double significance = 0.01;         // alpha of every test (Bonferroni within a test family)
  std::vector<std::string> strategies = {"speculative"};  // registry names the checks apply to
  // Sampling checks (first_token, sequence) only on cells whose params take one of the listed
  // values for every listed key, e.g. {gamma: [4]}; empty: every sampled checked cell.
  std::map<std::string, std::vector<std::string>> sampling_where;
  bool inject_residual_bug = false;   // testing only: plants a residual bug; checks must fail
  // Count the measured outputs that are whole strings of their constraint's language (complete,
  // not cut by max_new_tokens), per cell, into metrics and report.md. Every cell; no verdict.
  bool valid = false;
  // Check samples generated together (Strategy::generate_batch, one target forward per step for
  // all of them). Each sample's tokens equal its batch-1 generation's, so this changes only the
  // time the checks take. 1, or a strategy or model that cannot batch: one after another.
  int64_t batch_size = 8;
};

struct ExperimentConfig {
  std::string file;        // the YAML path, for messages
  std::string name;        // results/<name>/...
  std::string description;
  ModelChoice target;
  std::optional<ModelChoice> draft;
  std::vector<PromptItem> prompts;
  std::string prompts_file;  // as written (JSONL), empty for inline prompts
  // How candidates and the autoregressive baseline interleave:
  //   "cell":   each cell runs its own baseline right before it on every prompt (any strategy
  //             mix, distribution checks allowed);
  //   "prompt": Spec-Bench's layout: on each prompt the baseline runs once, then every cell;
  //             every cell must share one baseline (greedy at T=0). --resume continues at the
  //             first unfinished prompt.
  std::string interleave = "cell";
  std::string report_context;  // markdown file appended to report.md ("report.context"), as written
  std::vector<StrategyEntry> strategies;
  std::vector<SweepAxis> sweep;  // Cartesian grid, first axis varies slowest
  int64_t repeats = 3;
  int64_t warmup = 1;
  uint64_t seed = 1234;
  int64_t max_new_tokens = 64;
  // Sequences generated together in the measured runs (Strategy::generate_batch): all prompts of
  // a repeat go through one batched call, baseline and candidate alike, and throughput is
  // tokens / the batch's wall time. Sweepable (sweep: {batch_size: [1, 4, 16]}) and settable per
  // strategy (params.batch_size). > 1 needs single-turn prompts, interleave: cell, chain drafters
  // and the packed Llama engine.
  int64_t batch_size = 1;
  std::vector<std::string> stop;  // stop strings
  bool eos = true;                // stop at the tokenizer's EOS/end-of-turn ids
  double timeout_s = 0;           // per generation, 0 = none
  bool plots = true;
  ChecksConfig checks;
};

// An experiment name becomes the folder results/<name>/: 1-128 of [A-Za-z0-9._-], and not
// "." or "..", so no name can reach outside the results root. Throws specdec::Error
// "<where>: ..." naming the value otherwise.
void check_experiment_name(const std::string& name, const std::string& where);

// Deepest nesting accepted in an experiment YAML (and in --set values), and the most nodes
// (aliases counted at every use, so a "billion laughs" file is refused).
constexpr int k_max_yaml_depth = 256;
constexpr int64_t k_max_yaml_nodes = 1000000;
// The largest batch_size (experiment, per strategy, sweep, checks) accepted.
constexpr int64_t k_max_batch_size = 1024;

// Reads and parses `path`; `overrides` are "key.path=value" strings (value is YAML, so
// "sweep.gamma=[1,2]" works) applied to the tree before parsing.
ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from text; `file` names the source in messages and resolves relative prompt files.
ExperimentConfig parse_experiment(const std::string& yaml_text, const std::string& file,
                                  const std::vector<std::string>& overrides = {});

// The resolved configuration (defaults filled, prompts inlined) as YAML text.
std::string to_yaml(const ExperimentConfig& cfg);

// Prompts from a JSONL file, one object per line: {"text": ..., "chat": bool?, "category": str?,
// "id": str?, and any of json_schema (a string or an object), regex, grammar, response_format}, or Spec-Bench's {"question_id": ..., "category": ..., "turns": [...]} (turns[0] is
// the text, later turns the follow-ups). A line without "chat" takes chat_default.
std::vector<PromptItem> load_prompts_jsonl(const std::string& path, bool chat_default = false);

}  // namespace specdec::harness
