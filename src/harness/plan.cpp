#include "harness/plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/model_catalog.h"
#include "harness/report.h"
#include "sampling/grammar.h"
#include "strategies/registry.h"

namespace specdec::harness {

namespace reg = specdec::strategies;

bool strategy_accepts(const std::string& name, const std::string& key) {
  if (key == k_batch_size_param) return true;
  for (const auto& s : reg::find(name).params)
    if (s.name == key) return true;
  for (const auto& s : reg::processor_params())
    if (s.name == key) return true;
  return false;
}

namespace {

// A cell's or strategy entry's params as the strategy takes them: without the harness's batch_size.
reg::Params strategy_params(std::map<std::string, std::string> params) {
  params.erase(k_batch_size_param);
  return reg::Params(std::move(params));
}

int64_t parse_batch_size(const std::string& text, const std::string& where) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > k_max_batch_size)
    fail(where, ": batch_size must be an integer in [1, ", k_max_batch_size, "], got '", text, "'");
  return v;
}

size_t strategy_index(const ExperimentConfig& cfg, const std::string& label) {
  for (size_t i = 0; i < cfg.strategies.size(); ++i)
    if (cfg.strategies[i].label == label) return i;
  return 0;
}

// Checks the strategy entries and returns each one's resolved params (their constraint parsed
// once, for the cells to reuse).
std::vector<reg::Params> check_strategy_entries(const ExperimentConfig& cfg) {
  std::vector<reg::Params> resolved;
  for (size_t i = 0; i < cfg.strategies.size(); ++i) {
    const auto& s = cfg.strategies[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    try {
      reg::find(s.name);
    } catch (const Error& e) {
      fail(cfg.file, ": ", path, ".name: ", e.what());
    }
    try {
      resolved.push_back(reg::resolve(s.name, strategy_params(s.params)));
    } catch (const Error& e) {
      fail(cfg.file, ": ", path, ".params: ", e.what());
    }
    // A prompt's own constraint reaches every strategy on it (response_format: text is none).
    for (const auto& p : cfg.prompts)
      if (p.constraint && !reg::takes_constraint(s.name))
        fail(cfg.file, ": ", path, ": strategy '", s.name, "' takes no structured output, but prompt ", p.id,
             " sets ", p.constraint->key(), " (greedy, sampling and speculative take one)");
    if (s.params.count(k_batch_size_param))
      parse_batch_size(s.params.at(k_batch_size_param), cfg.file + ": " + path + ".params");
  }
  for (const auto& a : cfg.sweep)
    if (a.key == k_batch_size_param)
      for (const auto& v : a.values) parse_batch_size(v, cfg.file + ": sweep.batch_size");
  for (size_t a = 0; a < cfg.sweep.size(); ++a) {
    bool used = false;
    for (const auto& s : cfg.strategies) used = used || strategy_accepts(s.name, cfg.sweep[a].key);
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
    for (const auto& s : cfg.strategies)
      used = used || (std::find(cfg.checks.strategies.begin(), cfg.checks.strategies.end(), s.name) !=
                          cfg.checks.strategies.end() &&
                      strategy_accepts(s.name, key));
    if (!used)
      fail(cfg.file, ": checks.sampling_where.", key, ": no checked strategy takes parameter '", key, "'");
  }
  return resolved;
}

// Same value as written ("4" == "4") or as numbers ("0.70" == "0.7").
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char* ea = nullptr;
  char* eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;
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

// Resolves a cell (reusing its entry's parsed constraint: `entry`); a failure is pinned on the
// sweep value that caused it.
reg::Params resolve_cell(const ExperimentConfig& cfg, const Cell& c, const reg::Params& entry) {
  try {
    reg::Params given = strategy_params(c.params);
    given.set_constraint(entry.constraint());
    return reg::resolve(c.strategy, given);
  } catch (const Error& e) {
    for (const auto& [k, v] : c.point) {
      std::map<std::string, std::string> only = cfg.strategies[strategy_index(cfg, c.label)].params;
      only[k] = v;
      try {
        reg::resolve(c.strategy, strategy_params(only));
      } catch (const Error& e2) {
        fail(cfg.file, ": sweep.", k, ": value '", v, "' for strategy '", c.label, "': ", e2.what());
      }
    }
    fail(cfg.file, ": strategies[", strategy_index(cfg, c.label), "] (", c.key, "): ", e.what());
  }
}

// What a cell measured with batch_size > 1 needs (the engine is checked when the model is loaded).
void check_batched(const ExperimentConfig& cfg, const PlannedCell& pc, size_t entry) {
  const std::string where = cfg.file + ": strategies[" + std::to_string(entry) + "] (" + pc.cell.key +
                            "): batch_size " + std::to_string(pc.batch_size);
  if (cfg.interleave == "prompt")
    fail(where, ": interleave: prompt runs one prompt at a time; batched runs need interleave: cell");
  for (const auto& p : cfg.prompts)
    if (!p.follow_ups.empty())
      fail(where, ": prompt ", p.id, " has follow-up turns; batched runs take single-turn prompts");
}

void fill_baseline(PlannedCell& pc) {
  const auto proc = reg::processor_config(pc.resolved);
  pc.greedy = proc.greedy();
  // Beam search is deterministic, so its autoregressive reference is greedy decoding.
  pc.baseline = (pc.greedy || pc.cell.strategy == "beam") ? "greedy" : "sampling";
  std::map<std::string, std::string> bp;
  for (const auto& s : reg::processor_params()) bp[s.name] = pc.resolved.get_string(s.name);
  if (pc.baseline == "greedy") bp["temperature"] = "0";
  reg::Params given(bp);
  given.set_constraint(pc.resolved.constraint());  // the cell's constraint, parsed once
  pc.baseline_params = reg::resolve(pc.baseline, given);
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
  const std::vector<reg::Params> entries = check_strategy_entries(cfg);
  const bool tokenizerless = cfg.target.name.rfind("tiny-", 0) == 0;
  if (tokenizerless && !cfg.stop.empty())
    fail(cfg.file, ": stop: ", cfg.target.name, " has no tokenizer, so stop strings cannot match");
  // Likewise a grammar, which is compiled for the target's tokenizer (sampling/grammar.h).
  if (tokenizerless) {
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].constraint())
        fail(cfg.file, ": strategies[", i, "].params: ", entries[i].constraint()->key(),
             ": cannot compile the grammar for this model: ", cfg.target.name, " has no tokenizer");
    for (const auto& p : cfg.prompts)
      if (p.constraint)
        fail(cfg.file, ": prompt ", p.id, ": ", p.constraint->key(), ": cannot compile the grammar for this model: ",
             cfg.target.name, " has no tokenizer");
  }
  Plan plan;
  for (auto& cell : expand_cells(cfg, strategy_accepts)) {
    PlannedCell pc;
    pc.cell = cell;
    pc.resolved = resolve_cell(cfg, cell, entries[strategy_index(cfg, cell.label)]);
    // The strategy says what it needs (its drafter may want a draft model); see registry.h.
    reg::StrategyNeeds needs;
    try {
      needs = reg::strategy_needs(cell.strategy, pc.resolved, cfg.draft.has_value());
    } catch (const Error& e) {
      fail(cfg.file, ": strategies[", strategy_index(cfg, cell.label), "].params: ", e.what());
    }
    if (needs.draft_model && !cfg.draft)
      fail(cfg.file, ": strategies[", strategy_index(cfg, cell.label), "]: strategy '", cell.label, "'",
           needs.drafter.empty() ? "" : " (drafter '" + needs.drafter + "')", " needs a draft model: set models.draft");
    const auto batch = cell.params.find(k_batch_size_param);
    pc.batch_size = batch == cell.params.end() ? cfg.batch_size : parse_batch_size(batch->second, cfg.file);
    if (pc.batch_size > 1) check_batched(cfg, pc, strategy_index(cfg, cell.label));
    fill_baseline(pc);
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
