#include "harness/plan.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/model_catalog.h"
#include "harness/report.h"
#include "sampling/grammar.h"
#include "strategies/registry.h"

namespace specdec::harness {

namespace reg = specdec::strategies;

namespace {

// strategies[i] of the file, resolved once: its registry entry, its parameters (text and typed
// values, the constraint parsed) and the batch_size it pins. Its cells start from it.
struct Entry {
  const reg::StrategyInfo* info = nullptr;
  reg::Params resolved;
  std::optional<int64_t> batch_size;
};

// The file's strategy entries, each resolved once, and sweep.batch_size's values, each parsed once.
struct Entries {
  std::vector<Entry> list;                     // in the file's order
  std::map<std::string, int64_t> swept_batch;  // sweep.batch_size: text -> value
};

// Does the entry's strategy take parameter `key`? Every strategy takes the harness's batch_size.
bool takes(const Entry& e, const std::string& key) {
  return key == k_batch_size_param || reg::takes_param(*e.info, key);
}

// A cell's or strategy entry's params as the strategy takes them: without the harness's batch_size.
reg::Params strategy_params(std::map<std::string, std::string> params) {
  params.erase(k_batch_size_param);
  return reg::Params(std::move(params));
}

// `text` read as the registry reads a parameter's value (Params::get_int, get_float); empty when
// it does not parse.
template <class T>
std::optional<T> read_value(const std::string& text, T (reg::Params::*get)(const std::string&) const) {
  try {
    return (reg::Params({{"value", text}}).*get)("value");
  } catch (const Error&) {
    return std::nullopt;
  }
}

int64_t parse_batch_size(const std::string& text, const std::string& where) {
  const std::optional<int64_t> v = read_value(text, &reg::Params::get_int);
  if (!v || *v < 1 || *v > k_max_batch_size)
    fail(where, ": batch_size must be an integer in [1, ", k_max_batch_size, "], got '", text, "'");
  return *v;
}

// Checks the strategy entries and resolves each one once (its constraint parsed once, for the
// cells to reuse).
Entries check_strategy_entries(const ExperimentConfig& cfg) {
  Entries entries;
  for (size_t i = 0; i < cfg.strategies.size(); ++i) {
    const auto& s = cfg.strategies[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    Entry e;
    try {
      e.info = &reg::find(s.name);
    } catch (const Error& err) {
      fail(cfg.file, ": ", path, ".name: ", err.what());
    }
    try {
      e.resolved = reg::resolve(*e.info, strategy_params(s.params));
    } catch (const Error& err) {
      fail(cfg.file, ": ", path, ".params: ", err.what());
    }
    // A prompt's own constraint reaches every strategy on it (response_format: text is none).
    for (const auto& p : cfg.prompts)
      if (p.constraint && !e.info->takes_constraint)
        fail(cfg.file, ": ", path, ": strategy '", s.name, "' takes no structured output, but prompt ", p.id,
             " sets ", p.constraint->key(), " (greedy, sampling and speculative take one)");
    if (s.params.count(k_batch_size_param))
      e.batch_size = parse_batch_size(s.params.at(k_batch_size_param), cfg.file + ": " + path + ".params");
    entries.list.push_back(std::move(e));
  }
  for (const auto& a : cfg.sweep)
    if (a.key == k_batch_size_param)
      for (const auto& v : a.values) entries.swept_batch[v] = parse_batch_size(v, cfg.file + ": sweep.batch_size");
  for (size_t a = 0; a < cfg.sweep.size(); ++a) {
    bool used = false;
    for (const auto& e : entries.list) used = used || takes(e, cfg.sweep[a].key);
    if (!used) fail(cfg.file, ": sweep.", cfg.sweep[a].key, ": no strategy of this experiment takes parameter '",
                    cfg.sweep[a].key, "'");
  }
  std::set<std::string> names;
  for (const auto& info : reg::all()) names.insert(info.name);
  for (size_t i = 0; i < cfg.checks.strategies.size(); ++i)
    if (!names.count(cfg.checks.strategies[i]))
      fail(cfg.file, ": checks.strategies[", i, "]: unknown strategy '", cfg.checks.strategies[i], "'");
  for (const auto& [key, values] : cfg.checks.sampling_where) {
    bool used = false;
    for (size_t i = 0; i < cfg.strategies.size(); ++i)
      used = used || (std::find(cfg.checks.strategies.begin(), cfg.checks.strategies.end(), cfg.strategies[i].name) !=
                          cfg.checks.strategies.end() &&
                      takes(entries.list[i], key));
    if (!used)
      fail(cfg.file, ": checks.sampling_where.", key, ": no checked strategy takes parameter '", key, "'");
  }
  return entries;
}

// Same value as written ("4" == "4") or as numbers ("0.70" == "0.7").
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const std::optional<double> x = read_value(a, &reg::Params::get_float), y = read_value(b, &reg::Params::get_float);
  return x && y && *x == *y;
}

// checks.sampling_where: every listed key has one of its values among the cell's params.
bool sampling_selected(const ExperimentConfig& cfg, const Cell& cell) {
  for (const auto& [key, values] : cfg.checks.sampling_where) {
    const auto it = cell.params.find(key);
    if (it == cell.params.end()) return false;
    bool hit = false;
    for (const auto& v : values) hit = hit || same_value(it->second, v);
    if (!hit) return false;
  }
  return true;
}

// Params resolved once for each text: `done` holds them by `key` (the text), `resolve` makes them.
template <class Resolve>
const reg::Params& once(std::map<std::string, reg::Params>& done, const std::string& key, Resolve resolve) {
  auto it = done.find(key);
  if (it == done.end()) it = done.emplace(key, resolve()).first;
  return it->second;
}

// A cell's params: its entry's where no sweep value changes them; else the entry's with the
// point's values, resolved once for each such set (`done`; the constraint reused). A failure is
// pinned on the sweep value that caused it.
reg::Params resolve_cell(const ExperimentConfig& cfg, const Cell& c, const Entry& e,
                         std::map<std::string, reg::Params>& done) {
  std::map<std::string, std::string> changed = c.point;
  changed.erase(k_batch_size_param);
  if (changed.empty()) return e.resolved;
  const auto with = [&](const std::map<std::string, std::string>& values) {
    reg::Params given = e.resolved;
    for (const auto& [k, v] : values) given.set(k, v);
    given.set_constraint(e.resolved.constraint());
    return reg::resolve(*e.info, given);
  };
  try {
    return once(done, cell_key(c.label, changed), [&] { return with(changed); });
  } catch (const Error& err) {
    for (const auto& [k, v] : changed) {
      try {
        with({{k, v}});
      } catch (const Error& err2) {
        fail(cfg.file, ": sweep.", k, ": value '", v, "' for strategy '", c.label, "': ", err2.what());
      }
    }
    fail(cfg.file, ": strategies[", c.entry, "] (", c.key, "): ", err.what());
  }
}

// What a cell measured with batch_size > 1 needs (the engine is checked when the model is loaded).
void check_batched(const ExperimentConfig& cfg, const PlannedCell& pc) {
  const std::string where = cfg.file + ": strategies[" + std::to_string(pc.cell.entry) + "] (" + pc.cell.key +
                            "): batch_size " + std::to_string(pc.batch_size);
  if (cfg.interleave == "prompt")
    fail(where, ": interleave: prompt runs one prompt at a time; batched runs need interleave: cell");
  for (const auto& p : cfg.prompts)
    if (!p.follow_ups.empty())
      fail(where, ": prompt ", p.id, " has follow-up turns; batched runs take single-turn prompts");
}

// The cell's autoregressive baseline: greedy or sampling with the cell's processors and
// constraint. Cells with the same baseline share its params, resolved once (`done`).
void fill_baseline(PlannedCell& pc, std::map<std::string, reg::Params>& done) {
  const auto proc = reg::processor_config(pc.resolved);
  pc.greedy = proc.greedy();
  // Beam search is deterministic, so its autoregressive reference is greedy decoding.
  pc.baseline = (pc.greedy || pc.cell.strategy == "beam") ? "greedy" : "sampling";
  std::map<std::string, std::string> bp;
  for (const auto& s : reg::processor_params()) bp[s.name] = pc.resolved.values().at(s.name);
  if (pc.baseline == "greedy") bp["temperature"] = "0";
  pc.baseline_params = once(done, cell_key(pc.baseline, bp), [&] {
    reg::Params given(bp);
    given.set_constraint(pc.resolved.constraint());  // the cell's constraint, parsed once
    return reg::resolve(pc.baseline, given);
  });
  // A baseline strategy measured against itself needs no interleaved twin.
  if (pc.cell.strategy == pc.baseline) pc.baseline.clear();
}

void count_work(const ExperimentConfig& cfg, PlannedCell& pc) {
  int64_t n_turns = 0;  // one generate() per turn
  for (const auto& p : cfg.prompts) n_turns += 1 + static_cast<int64_t>(p.follow_ups.size());
  // interleave: prompt runs the shared baseline once per prompt (counted in make_plan).
  const int64_t per_run = (pc.baseline.empty() || cfg.interleave == "prompt" ? 1 : 2);
  pc.n_generations = (cfg.repeats * n_turns + cfg.warmup) * per_run;
  pc.max_target_forwards = pc.n_generations * (cfg.max_new_tokens + 1);
  if (!pc.checked) return;
  const auto& k = cfg.checks;
  if (pc.greedy) return;  // greedy equality reuses the measured outputs
  int64_t n_cand = 0, n_base = 0;
  if (k.first_token) n_cand = k.first_token_samples;
  if (k.sequence) {
    n_cand = std::max(n_cand, k.sequence_samples);
    n_base = k.sequence_samples;
  }
  const int64_t len = std::max<int64_t>(2, k.sequence_length);
  pc.n_generations += n_cand + n_base;
  // + one likelihood forward per sequence-test sample on each side
  pc.max_target_forwards += (n_cand + n_base) * (len + 1) + (k.sequence ? 2 * k.sequence_samples : 0);
}

// interleave: prompt: every cell must be measured against the same autoregressive baseline,
// which then runs once per prompt; only greedy equality can be checked (the sampling checks
// run per cell).
void share_baseline(const ExperimentConfig& cfg, Plan& plan) {
  for (size_t i = 0; i < plan.cells.size(); ++i) {
    const auto& pc = plan.cells[i];
    const std::string where = cfg.file + ": interleave: prompt: cell '" + pc.cell.key + "'";
    if (pc.baseline.empty())
      fail(where, " is the autoregressive baseline itself; it runs once per prompt anyway, drop the strategy");
    if (pc.checked && !pc.greedy && (cfg.checks.first_token || cfg.checks.sequence))
      fail(where, " would need the sampling checks, which run per cell: use interleave: cell");
    if (i == 0) {
      plan.baseline = pc.baseline;
      plan.baseline_params = pc.baseline_params;
    } else if (pc.baseline != plan.baseline || format_params(pc.baseline_params.values()) !=
                                                   format_params(plan.baseline_params.values())) {
      fail(where, " needs baseline ", pc.baseline, " (", format_params(pc.baseline_params.values()),
           ") but cell '", plan.cells[0].cell.key, "' needs ", plan.baseline, " (",
           format_params(plan.baseline_params.values()), "): cells of one prompt-interleaved run share one baseline");
    }
  }
  PlannedCell base;
  base.baseline = plan.baseline;
  count_work(cfg, base);
  plan.n_generations += base.n_generations;
  plan.max_target_forwards += base.max_target_forwards;
}

}  // namespace

Plan make_plan(const ExperimentConfig& cfg, bool check_models) {
  if (check_models) {
    try {
      resolve_model(cfg.target.name);
    } catch (const Error& e) {
      fail(cfg.file, ": models.target: ", e.what());
    }
    if (cfg.draft) try {
        resolve_model(cfg.draft->name);
      } catch (const Error& e) {
        fail(cfg.file, ": models.draft: ", e.what());
      }
  }
  const Entries entries = check_strategy_entries(cfg);
  const bool tokenizerless = cfg.target.name.rfind("tiny-", 0) == 0;
  if (tokenizerless && !cfg.stop.empty())
    fail(cfg.file, ": stop: ", cfg.target.name, " has no tokenizer, so stop strings cannot match");
  // Likewise a grammar, which is compiled for the target's tokenizer (sampling/grammar.h).
  if (tokenizerless) {
    for (size_t i = 0; i < entries.list.size(); ++i)
      if (entries.list[i].resolved.constraint())
        fail(cfg.file, ": strategies[", i, "].params: ", entries.list[i].resolved.constraint()->key(),
             ": cannot compile the grammar for this model: ", cfg.target.name, " has no tokenizer");
    for (const auto& p : cfg.prompts)
      if (p.constraint)
        fail(cfg.file, ": prompt ", p.id, ": ", p.constraint->key(), ": cannot compile the grammar for this model: ",
             cfg.target.name, " has no tokenizer");
  }
  Plan plan;
  std::map<std::string, reg::Params> cells, baselines;  // resolved once for each text (once())
  const auto accepts = [&](size_t entry, const std::string& key) { return takes(entries.list[entry], key); };
  for (auto& cell : expand_cells(cfg, accepts)) {
    const Entry& e = entries.list[cell.entry];
    PlannedCell pc;
    pc.cell = cell;
    pc.resolved = resolve_cell(cfg, cell, e, cells);
    // The strategy says what it needs (its drafter may want a draft model); see registry.h.
    try {
      pc.needs = reg::strategy_needs(*e.info, pc.resolved, cfg.draft.has_value());
    } catch (const Error& err) {
      fail(cfg.file, ": strategies[", cell.entry, "].params: ", err.what());
    }
    if (pc.needs.draft_model && !cfg.draft)
      fail(cfg.file, ": strategies[", cell.entry, "]: strategy '", cell.label, "'",
           pc.needs.drafter.empty() ? "" : " (drafter '" + pc.needs.drafter + "')",
           " needs a draft model: set models.draft");
    // The entry's own batch_size wins over the sweep's (as in the cell's params), then the file's.
    const auto swept = cell.point.find(k_batch_size_param);
    pc.batch_size = e.batch_size                 ? *e.batch_size
                    : swept != cell.point.end() ? entries.swept_batch.at(swept->second)
                                                : cfg.batch_size;
    if (pc.batch_size > 1) check_batched(cfg, pc);
    fill_baseline(pc, baselines);
    pc.checked = std::find(cfg.checks.strategies.begin(), cfg.checks.strategies.end(), cell.strategy) !=
                 cfg.checks.strategies.end();
    if (pc.checked && !pc.greedy) pc.checked = sampling_selected(cfg, cell);
    count_work(cfg, pc);
    plan.n_generations += pc.n_generations;
    plan.max_target_forwards += pc.max_target_forwards;
    plan.cells.push_back(std::move(pc));
  }
  if (cfg.interleave == "prompt") share_baseline(cfg, plan);
  return plan;
}

std::string format_plan(const ExperimentConfig& cfg, const Plan& plan) {
  std::ostringstream os;
  os << "experiment " << cfg.name << " (" << cfg.file << ")\n"
     << "  target " << cfg.target.name << " [" << cfg.target.dtype << ", " << cfg.target.threads << " threads]";
  if (cfg.draft) os << ", draft " << cfg.draft->name << " [" << cfg.draft->dtype << "]";
  std::map<std::string, int> cats;
  for (const auto& p : cfg.prompts) ++cats[p.category];
  os << "\n  prompts " << cfg.prompts.size() << " (";
  bool first = true;
  for (const auto& [c, n] : cats) {
    os << (first ? "" : ", ") << c << ": " << n;
    first = false;
  }
  os << "), repeats " << cfg.repeats << ", warmup " << cfg.warmup << ", max_new_tokens " << cfg.max_new_tokens
     << ", seed " << cfg.seed;
  if (cfg.batch_size != 1) os << ", batch_size " << cfg.batch_size;
  os << "\n";
  if (cfg.interleave == "prompt")
    os << "  interleave prompt: on each prompt the baseline " << plan.baseline << " runs once, then every cell\n";
  os << "  cells " << plan.cells.size() << ":\n";
  for (size_t i = 0; i < plan.cells.size(); ++i) {
    const auto& c = plan.cells[i];
    os << "    [" << i + 1 << "] " << c.cell.label << "  " << format_params(c.cell.params) << "  baseline "
       << (c.baseline.empty() ? "(self)" : c.baseline) << "  checks "
       << (!c.checked ? "none" : c.greedy ? (cfg.checks.greedy_equality ? "greedy_equality" : "none")
                                         : std::string(cfg.checks.first_token ? "first_token " : "") +
                                               (cfg.checks.sequence ? "sequence" : ""))
       << "  generations " << c.n_generations << "\n";
  }
  os << "  total: " << plan.n_generations << " generations, at most " << plan.max_target_forwards
     << " target forwards (autoregressive upper bound)\n";
  return os.str();
}

}  // namespace specdec::harness
