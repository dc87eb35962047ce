#pragma once
// The decoding-strategy interface. A strategy turns a Request into a Result and streams
// tokens to a callback as soon as they are final.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <vector>

#include "core/types.h"
#include "sampling/processors.h"
#include "strategies/phases.h"

namespace specdec::kernels { class Backend; }
namespace specdec::model { class CausalLM; }
namespace specdec::sampling { class Constraint; }
namespace specdec::tokenizer { class Tokenizer; }

namespace specdec::strategies {

class TraceRecorder;  // strategies/trace.h

struct StopCriteria {
  std::vector<TokenId> eos_ids;            // any of these ends generation (kept in output)
  int64_t max_new_tokens = 128;
  std::vector<std::string> stop_strings;   // matched on decoded text; cut from the output
  double timeout_s = 0;                    // wall clock; 0 = none
};

// The logits processors (temperature, top-k, top-p, min-p, repetition penalty) are strategy
// parameters shared by every strategy (registry.h: processor_params), so they are fixed when
// the strategy is created; processor_config(params) gives the same chain to anyone who needs
// the exact processed distribution (the harness's checks).
struct Request {
  Tokens prompt;
  std::shared_ptr<model::CausalLM> target;
  std::shared_ptr<model::CausalLM> draft;            // may be null
  std::shared_ptr<tokenizer::Tokenizer> tokenizer;   // the target's
  StopCriteria stop;
  uint64_t seed = 0;
  // Addition (owner: strat): the draft model's tokenizer; when set, speculative decoding
  // checks it against `tokenizer` (vocab size, special tokens, sampled token strings).
  std::shared_ptr<tokenizer::Tokenizer> draft_tokenizer;
  // The backend that verifies drafts (kernels/backend.h); null: the one of the target model's
  // device. The harness's self-check (checks.inject_residual_bug) passes a wrapping one.
  std::shared_ptr<kernels::Backend> backend;
  // Addition (owner: trace): when set, the strategy hands it every round (speculative) or
  // step (autoregressive) for `specdec trace` / `generate --trace`; beam search refuses it.
  std::shared_ptr<TraceRecorder> trace;
  // Structured output for this request alone (sampling/grammar.h), instead of the strategy's
  // (Params::constraint): unset, the strategy's; set to null, none. The harness sets it from a
  // prompt's own constraint keys. Greedy, sampling and speculative take it; beam refuses one.
  std::optional<std::shared_ptr<const sampling::Constraint>> constraint;
};

enum class FinishReason { eos, length, stop_string, timeout };
const char* to_string(FinishReason r);

struct Stats {
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  int64_t n_target_forwards = 0;   // including prefill
  int64_t n_draft_forwards = 0;
  // speculative decoding
  int64_t n_drafted = 0;
  int64_t n_accepted = 0;
  // Structured output: draft tokens the grammar forced, drafted without the drafter and always
  // accepted (speculative/proposer.h: prepend_forced; n_drafted and n_accepted count them too);
  // n_forced / n_generated is the forced-token share.
  int64_t n_forced = 0;
  // Structured output's jump-forward tokens (speculative's jump_forward; sampling::ConstraintState::
  // lead): drafted without the drafter after the forced ones, and verified: n_jump_drafted
  // proposed, n_jump of them accepted (counted in n_drafted and n_accepted too); n_jump /
  // n_generated is the jump-forward share.
  int64_t n_jump_drafted = 0, n_jump = 0;
  // Structured output: draft tokens the grammar refused where they stood (their parent's masked
  // target row gives them probability 0; sampling::ConstraintState::mask), each rejected. A
  // drafter that drafts inside the grammar (draft_mask) has none.
  int64_t n_refused = 0;
  int64_t n_rounds = 0;                        // verification rounds
  int64_t n_tree_rounds = 0;                   // of which verified a token tree (not a chain)
  // Rounds per kernel mode that verified them ("greedy", "sampling", "tokens_only", "block"):
  // what verify=... and the drafter's proposals actually ran (temperature 0 is always greedy).
  std::map<std::string, int64_t> verify_mode_rounds;
  // Not empty: speculative's synthetic_acceptance (benchmarking the loop, never the default):
  // each round accepted its draft nodes with these probabilities (by child rank; one value: all
  // ranks) instead of verifying them, so the tokens are NOT the target's. Every output that
  // carries the stats says so.
  std::vector<double> synthetic_acceptance;
  std::vector<int64_t> accepted_per_position;  // [gamma_max]: rounds accepting position i
  std::vector<int64_t> drafted_per_position;   // [gamma_max]: rounds drafting position i
  // The controller's decision of each round (speculative/controller.h): rounds by the draft
  // length it chose, [gamma_max + 1] (index 0: stepped aside, a round of plain decoding), and
  // the tokens emitted in the rounds at 0. The drafter may propose fewer tokens than chosen
  // (an n-gram lookup without a match); those rounds count at the length chosen.
  std::vector<int64_t> gamma_rounds;
  int64_t n_aside_tokens = 0;
  // Several drafters (speculative's `drafters`), by name: the rounds the controller chose each
  // one to draft (a length > 0) and the tokens it drafted and got accepted in them (forced
  // tokens left out); empty with one drafter.
  struct DrafterCounts {
    int64_t rounds = 0, drafted = 0, accepted = 0;
  };
  std::map<std::string, DrafterCounts> per_drafter;
  double alpha() const { return n_drafted ? double(n_accepted) / double(n_drafted) : 0.0; }
  // Mean tokens per target forward that yields tokens, the bonus token included (Spec-Bench's
  // "mean accepted tokens"): per verification round, or 1.00 for autoregressive decoding.
  double tau() const;
  // Time per phase (ms). Strategies built on autoregressive_decode and speculative decoding
  // charge all of generate() to some phase, so phase_ms.sum() equals ms_total (within the
  // microseconds of assembling the Result); beam search times its main phases only.
  PhaseTimes phase_ms;
  double ms_total = 0;                         // wall time of generate()
  // Figures a drafter reports about itself (Drafter::report), e.g. the tree drafter's chosen
  // node budget and its measured verify-cost curve ("verify_ms_rows_<n>").
  std::map<std::string, double> drafter_stats;
  double ms_first_token = 0;                   // time to first token (from start)
};

struct Result {
  Tokens tokens;          // generated tokens (after stop handling)
  std::string text;       // decoded generated text (stop string cut)
  FinishReason finish = FinishReason::length;
  Stats stats;
  // Beam search: all returned sequences, best first (tokens/text/score); empty otherwise.
  struct Sequence { Tokens tokens; std::string text; double score = 0; };
  std::vector<Sequence> sequences;
};

// Called with each chunk of newly final tokens and the text they complete.
using TokenCallback = std::function<void(const Tokens& tokens, const std::string& text)>;

// Strategy parameters: name -> value as text, typed and validated against the schema.
struct ParamSpec {
  std::string name;
  std::string type;           // "int" | "float" | "bool" | "string"
  std::string default_value;
  std::string help;
};

class Params {
 public:
  Params() = default;
  explicit Params(std::map<std::string, std::string> values) : values_(std::move(values)) {}
  // Changes a value; the typed values parsed from the old ones are dropped (resolve again).
  void set(const std::string& key, const std::string& value) {
    values_[key] = value;
    typed_.clear();
    resolved_for_.clear();
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  const std::map<std::string, std::string>& values() const { return values_; }
  // Typed getters; throw specdec::Error naming key and value when it does not parse.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  // Structured output, parsed by resolve() (registry.h) from the keys json_schema, regex,
  // grammar and response_format; null: none, or params not resolved. The strategies take this
  // parsed value; resolving the params again reuses it while those keys keep their values.
  const std::shared_ptr<const sampling::Constraint>& constraint() const { return constraint_; }
  void set_constraint(std::shared_ptr<const sampling::Constraint> c) { constraint_ = std::move(c); }
  // The typed values resolve() parsed from the text, once (strategies/param_table.h): the
  // strategy's struct, each drafter's, sampling::ProcessorConfig. typed<T>() of a struct not
  // parsed (params not resolved) is a specdec::Error.
  template <class T>
  const T& typed() const {
    const auto it = typed_.find(std::type_index(typeid(T)));
    if (it == typed_.end()) fail_not_resolved(typeid(T).name());
    return *static_cast<const T*>(it->second.get());
  }
  // The typed value of T, or null when none was parsed (another strategy's params).
  template <class T>
  const T* find_typed() const {
    const auto it = typed_.find(std::type_index(typeid(T)));
    return it == typed_.end() ? nullptr : static_cast<const T*>(it->second.get());
  }
  template <class T>
  void set_typed(T value) {
    typed_[std::type_index(typeid(T))] = std::make_shared<const T>(std::move(value));
  }
  // The strategy these values were resolved for (resolve()); "" when not resolved, or changed since.
  const std::string& resolved_for() const { return resolved_for_; }
  void set_resolved_for(std::string name) { resolved_for_ = std::move(name); }

 private:
  [[noreturn]] static void fail_not_resolved(const char* type);
  std::map<std::string, std::string> values_;
  std::shared_ptr<const sampling::Constraint> constraint_;
  std::map<std::type_index, std::shared_ptr<const void>> typed_;  // shared: copies of Params are cheap
  std::string resolved_for_;
};

// Batched generation (strategies/batch.h): several requests decoded together.
struct BatchOptions {
  int64_t batch_size = 8;       // sequences decoded together (one target forward per step), >= 1
  int64_t cache_positions = 0;  // KV-cache positions per sequence; 0: the most any request needs
};

// Called with the index of the request whose tokens these are, and as TokenCallback.
using BatchTokenCallback = std::function<void(size_t request, const Tokens& tokens, const std::string& text)>;

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual Result generate(const Request& req, const TokenCallback& on_token) = 0;
  // Results in the order of `requests`; each equals generate() of its request alone (the same
  // tokens, for a strategy seeded by Request::seed at any temperature). Up to batch_size
  // requests run at once, all on the same target model; a finished one leaves the batch and
  // the next request takes its place. The default runs the requests one after another
  // (batch.cpp); strategies that share the target's forwards override it.
  virtual std::vector<Result> generate_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                             const BatchTokenCallback& on_token);
};

}  // namespace specdec::strategies
