// The strategy registry: a name table and one factory (DESIGN principle 3).
// Each strategy file defines `StrategyInfo <name>_info()`; adding one is one line below.
// Strategies outside the library (examples/) join with register_strategy before the first read.
#include "strategies/registry.h"

#include <mutex>
#include <sstream>

#include "core/error.h"
#include "sampling/grammar.h"
#include "strategies/param_table.h"

#define SPECDEC_STRATEGY_LIST(X) \
  X(greedy)                      \
  X(sampling)                    \
  X(beam)                        \
  X(speculative)

namespace specdec::strategies {

#define SPECDEC_DECLARE_INFO(name) StrategyInfo name##_info();
SPECDEC_STRATEGY_LIST(SPECDEC_DECLARE_INFO)
#undef SPECDEC_DECLARE_INFO

namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
  return os.str();
}

const ParamSpec* find_spec(const std::vector<ParamSpec>& specs, const std::string& key) {
  for (const auto& s : specs)
    if (s.name == key) return &s;
  return nullptr;
}

void check_type(const std::string& strategy, const ParamSpec& spec, const Params& p) {
  try {
    if (spec.type == "int") p.get_int(spec.name);
    else if (spec.type == "float") p.get_float(spec.name);
    else if (spec.type == "bool") p.get_bool(spec.name);
  } catch (const Error& e) {
    fail("strategy '", strategy, "': ", e.what());
  }
}

}  // namespace

namespace {
// The logits processors: a ParamTable like any strategy's, whose struct is the chain's config.
const ParamTable<sampling::ProcessorConfig>& processor_table() {
  using C = sampling::ProcessorConfig;
  static const ParamTable<C> table =
      ParamTable<C>()
          .field("temperature", &C::temperature, "1.0", "softmax temperature; 0 = greedy (argmax)")
          .field("top_k", &C::top_k, "0", "keep the k most likely tokens (ties kept); 0 = off")
          .field("top_p", &C::top_p, "1.0", "nucleus: keep the smallest set with mass >= top_p; 1 = off")
          .field("min_p", &C::min_p, "0.0", "drop tokens below min_p * max probability; 0 = off")
          .field("repetition_penalty", &C::repetition_penalty, "1.0",
                 "HF: divide positive / multiply negative logits of seen tokens")
          // Structured output (sampling/grammar.h): at most one; greedy, sampling and speculative.
          // resolve() parses them into Params::constraint.
          .text("json_schema", "", "structured output: a JSON Schema, inline JSON or a file path ('' = none)")
          .text("regex", "", "structured output: a regular expression the whole output matches ('' = none)")
          .text("grammar", "", "structured output: an EBNF/GBNF grammar (root ::= ...), inline or a file ('' = none)")
          .text("response_format", "text", "structured output: json (any JSON value) | text (none)")
          .finish([](C& c) {
            SD_CHECK(c.temperature >= 0, "strategy parameter 'temperature' must be >= 0, got ", c.temperature);
            SD_CHECK(c.top_k >= 0, "strategy parameter 'top_k' must be >= 0, got ", c.top_k);
            SD_CHECK(c.top_p > 0 && c.top_p <= 1, "strategy parameter 'top_p' must be in (0, 1], got ", c.top_p);
            SD_CHECK(c.min_p >= 0 && c.min_p <= 1, "strategy parameter 'min_p' must be in [0, 1], got ", c.min_p);
            SD_CHECK(c.repetition_penalty > 0, "strategy parameter 'repetition_penalty' must be > 0, got ",
                     c.repetition_penalty);
          });
  return table;
}
}  // namespace

const std::vector<ParamSpec>& processor_params() {
  static const std::vector<ParamSpec> specs = processor_table().specs();
  return specs;
}

const sampling::ProcessorConfig& processor_config(const Params& resolved) {
  return resolved.typed<sampling::ProcessorConfig>();
}

namespace {
std::mutex g_added_mutex;
bool g_table_made = false;  // all() has made the table: register_strategy is too late
std::vector<StrategyInfo>& added() {  // register_strategy's, in order
  static std::vector<StrategyInfo> infos;
  return infos;
}
}  // namespace

void register_strategy(StrategyInfo info) {
  std::lock_guard<std::mutex> lock(g_added_mutex);
  SD_CHECK(!g_table_made, "register_strategy: strategy '", info.name,
           "' comes after the strategy registry was first read; register it at the start of main()");
  SD_CHECK(!info.name.empty() && info.factory != nullptr, "register_strategy: strategy '", info.name,
           "' needs a name and a factory");
  added().push_back(std::move(info));
}

const std::vector<StrategyInfo>& all() {
#define SPECDEC_INFO_ENTRY(name) name##_info(),
  static const std::vector<StrategyInfo> infos = [] {
    std::vector<StrategyInfo> out = {SPECDEC_STRATEGY_LIST(SPECDEC_INFO_ENTRY)};
    std::lock_guard<std::mutex> lock(g_added_mutex);
    g_table_made = true;
    for (const auto& info : added()) {
      for (const auto& other : out)
        SD_CHECK(other.name != info.name, "register_strategy: a strategy named '", info.name,
                 "' is already registered");
      out.push_back(info);
    }
    return out;
  }();
#undef SPECDEC_INFO_ENTRY
  return infos;
}

const StrategyInfo& find(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& info : all()) {
    if (info.name == name) return info;
    names.push_back(info.name);
  }
  fail("unknown strategy '", name, "'; valid strategies: ", join_names(names));
}

bool takes_param(const StrategyInfo& info, const std::string& key) {
  return find_spec(info.params, key) || find_spec(processor_params(), key);
}

Params resolve(const std::string& name, const Params& given) { return resolve(find(name), given); }

Params resolve(const StrategyInfo& info, const Params& given) {
  const std::string& name = info.name;
  // Strategy-specific specs come first so a strategy may override a processor default.
  std::vector<ParamSpec> specs = info.params;
  for (const auto& s : processor_params())
    if (!find_spec(specs, s.name)) specs.push_back(s);
  for (const auto& [key, value] : given.values()) {
    if (find_spec(specs, key)) continue;
    std::vector<std::string> names;
    for (const auto& s : specs) names.push_back(s.name);
    fail("strategy '", name, "': unknown parameter '", key, "' (= '", value, "'); valid parameters: ",
         join_names(names));
  }
  Params out(given.values());  // typed values are parsed afresh below
  for (const auto& s : specs)
    if (!out.has(s.name)) out.set(s.name, s.default_value);
  for (const auto& s : specs) check_type(name, s, out);
  out.set_typed(processor_table().parse(out));  // range checks
  // Structured output: parsed here, once (params resolved before keep their parse), so that a
  // malformed schema or grammar is named before any model loads; the strategy takes the parse.
  out.set_constraint(sampling::Constraint::from_params(out.values(), given.constraint()));
  if (out.constraint())
    SD_CHECK(info.takes_constraint, "strategy '", name, "': structured output (", out.constraint()->key(),
             ") is supported by greedy, sampling and speculative only");
  // The strategy's own struct, parsed and checked once; its factory reads it.
  if (info.parse) info.parse(out);
  out.set_resolved_for(name);
  return out;
}

std::unique_ptr<Strategy> create(const std::string& name, const Params& given) {
  if (given.resolved_for() == name) return find(name).factory(given);
  return find(name).factory(resolve(name, given));
}

StrategyNeeds strategy_needs(const std::string& name, const Params& resolved, bool have_draft_model) {
  return strategy_needs(find(name), resolved, have_draft_model);
}

StrategyNeeds strategy_needs(const StrategyInfo& info, const Params& resolved, bool have_draft_model) {
  return info.needs ? info.needs(resolved, have_draft_model) : StrategyNeeds{};
}

}  // namespace specdec::strategies
