// The cell records of metrics.json and their parts (metrics.h), to JSON and back. The figures
// themselves are computed from the samples in cell_metrics.cpp.
#include "harness/metrics.h"

#include "core/error.h"

namespace specdec::harness {

using nlohmann::json;

double CellMetrics::aside_round_share() const {
  int64_t n = 0;
  for (int64_t r : gamma_rounds) n += r;
  return n ? double(gamma_rounds[0]) / double(n) : 0;
}

double CellMetrics::forced_share() const { return n_generated ? double(n_forced) / double(n_generated) : 0; }
double CellMetrics::refused_share() const { return n_drafted ? double(n_refused) / double(n_drafted) : 0; }
double CellMetrics::jump_share() const { return n_generated ? double(n_jump) / double(n_generated) : 0; }

double CellMetrics::aside_token_share() const {
  return n_generated ? double(n_aside_tokens) / double(n_generated) : 0;
}

bool CellMetrics::checks_passed() const {
  for (const auto& c : checks)
    if (!c.pass) return false;
  return true;
}

namespace {
json spread_json(const Spread& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"q25", s.q25}, {"q75", s.q75}};
}
Spread spread_from(const json& j) {
  return {j.at("median").get<double>(), j.at("min").get<double>(), j.at("max").get<double>(),
          j.at("q25").get<double>(), j.at("q75").get<double>()};
}

// Phases missing from the record (written before a phase existed) read as 0.
PhaseBreakdown phases_from(const json& j) {
  PhaseBreakdown p;
  p.wall_ms = j.at("wall_ms").get<double>();
  p.n_rounds = j.at("n_rounds").get<int64_t>();
  p.n_generations = j.at("n_generations").get<int64_t>();
  p.ms = phase_ms_from(j.at("ms"));
  return p;
}
}  // namespace

json to_json(const strategies::PhaseTimes& t) {
  json ms = json::object();
  for (const auto& f : strategies::PhaseTimes::fields()) ms[f.name] = t.*f.ms;
  return ms;
}

strategies::PhaseTimes phase_ms_from(const json& ms) {
  strategies::PhaseTimes t;
  for (const auto& f : strategies::PhaseTimes::fields()) t.*f.ms = ms.value(f.name, 0.0);
  return t;
}

void add_per_drafter(const json& j, CellMetrics::PerDrafter& into) {
  for (const auto& [name, c] : j.items()) {
    auto& sum = into[name];
    sum.rounds += c.at("rounds").get<int64_t>();
    sum.drafted += c.at("drafted").get<int64_t>();
    sum.accepted += c.at("accepted").get<int64_t>();
  }
}

json to_json(const PhaseBreakdown& p) {
  json fraction = json::object();
  for (const auto& f : strategies::PhaseTimes::fields()) fraction[f.name] = p.fraction(f.ms);
  return {{"wall_ms", p.wall_ms}, {"n_rounds", p.n_rounds}, {"n_generations", p.n_generations},
          {"ms", to_json(p.ms)}, {"fraction", fraction}};
}

json to_json(const LoadSample& l) {
  return {{"verdict", l.verdict()}, {"contended", l.contended()}, {"wall_s", l.wall_s},
          {"loadavg_start", l.loadavg_start}, {"loadavg_end", l.loadavg_end}, {"loadavg_max", l.loadavg_max},
          {"involuntary_switches", l.involuntary_switches},
          {"involuntary_switches_per_s", l.involuntary_switches_per_s}, {"own_cpu_s", l.own_cpu_s},
          {"foreign_cpu_s", l.foreign_cpu_s}, {"foreign_cores", l.foreign_cores},
          {"steal_fraction", l.steal_fraction}, {"resolution_cores", l.resolution_cores}, {"n_cpus", l.n_cpus}};
}

// "verdict" and "contended" are derived, so they are recomputed rather than read.
LoadSample load_from_json(const json& j) {
  LoadSample l;
  l.wall_s = j.value("wall_s", 0.0);
  l.loadavg_start = j.value("loadavg_start", -1.0);
  l.loadavg_end = j.value("loadavg_end", -1.0);
  l.loadavg_max = j.value("loadavg_max", -1.0);
  l.involuntary_switches = j.value("involuntary_switches", int64_t{-1});
  l.involuntary_switches_per_s = j.value("involuntary_switches_per_s", -1.0);
  l.own_cpu_s = j.value("own_cpu_s", -1.0);
  l.foreign_cpu_s = j.value("foreign_cpu_s", -1.0);
  l.foreign_cores = j.value("foreign_cores", -1.0);
  l.steal_fraction = j.value("steal_fraction", -1.0);
  l.resolution_cores = j.value("resolution_cores", -1.0);
  l.n_cpus = j.value("n_cpus", -1);
  return l;
}

json to_json(const CellMetrics& m) {
  json checks = json::array();
  for (const auto& c : m.checks)
    checks.push_back({{"name", c.name}, {"pass", c.pass}, {"p_value", c.p_value}, {"significance", c.significance},
                      {"n_samples", c.n_samples}, {"detectable_tv", c.detectable_tv}, {"detail", c.detail}});
  json cats = json::object();
  for (const auto& [k, c] : m.categories)
    cats[k] = {{"n_prompts", c.n_prompts}, {"tok_s", c.tok_s}, {"speedup", c.speedup}, {"mean_tok_s", c.mean_tok_s},
               {"mean_baseline_tok_s", c.mean_baseline_tok_s}, {"mean_speedup", c.mean_speedup}, {"tau", c.tau}};
  json j = {{"key", m.cell.key}, {"label", m.cell.label}, {"strategy", m.cell.strategy},
          {"params", m.cell.params}, {"point", m.cell.point}, {"baseline", m.baseline},
          {"n_prompts", m.n_prompts}, {"n_repeats", m.n_repeats}, {"n_generated", m.n_generated},
          {"tok_s", spread_json(m.tok_s)}, {"baseline_tok_s", spread_json(m.baseline_tok_s)},
          {"speedup", spread_json(m.speedup)}, {"ms_per_token", m.ms_per_token}, {"ttft_ms", m.ttft_ms},
          {"gamma", m.gamma}, {"n_drafted", m.n_drafted}, {"n_accepted", m.n_accepted}, {"n_rounds", m.n_rounds},
          {"n_target_forwards", m.n_target_forwards}, {"alpha", m.alpha}, {"tau", m.tau},
          {"mean_tok_s", m.mean_tok_s}, {"mean_baseline_tok_s", m.mean_baseline_tok_s},
          {"mean_speedup", m.mean_speedup}, {"decode_speedup", m.decode_speedup},
          {"acceptance_per_position", m.acceptance_per_position}, {"gamma_rounds", m.gamma_rounds},
          {"n_aside_tokens", m.n_aside_tokens}, {"per_drafter", per_drafter_json(m.per_drafter)},
          {"stepped_aside", {{"rounds", m.aside_round_share()}, {"tokens", m.aside_token_share()}}},
          {"n_forced", m.n_forced}, {"forced_share", m.forced_share()},
          {"n_refused", m.n_refused}, {"refused_share", m.refused_share()},
          {"n_jump_drafted", m.n_jump_drafted}, {"n_jump", m.n_jump}, {"jump_share", m.jump_share()},
          {"draft_step_ms", m.draft_step_ms},
          {"target_step_ms", m.target_step_ms}, {"cost_ratio", m.cost_ratio},
          {"predicted_speedup", m.predicted_speedup}, {"measured_over_predicted", m.measured_over_predicted},
          {"categories", cats}, {"checks", checks}, {"wall_s", m.wall_s}, {"phases", to_json(m.phases)},
          {"baseline_phases", to_json(m.baseline_phases)}, {"load", to_json(m.load)}};
  if (m.n_constrained > 0)
    j["valid"] = {{"n_constrained", m.n_constrained}, {"n_valid", m.n_valid},
                  {"rate", double(m.n_valid) / double(m.n_constrained)}};
  return j;
}

CellMetrics cell_from_json(const json& j) {
  CellMetrics m;
  try {
    m.cell.key = j.at("key").get<std::string>();
    m.cell.label = j.at("label").get<std::string>();
    m.cell.strategy = j.at("strategy").get<std::string>();
    m.cell.params = j.at("params").get<std::map<std::string, std::string>>();
    m.cell.point = j.at("point").get<std::map<std::string, std::string>>();
    m.baseline = j.at("baseline").get<std::string>();
    m.n_prompts = j.at("n_prompts").get<int64_t>();
    m.n_repeats = j.at("n_repeats").get<int64_t>();
    m.n_generated = j.at("n_generated").get<int64_t>();
    m.tok_s = spread_from(j.at("tok_s"));
    m.baseline_tok_s = spread_from(j.at("baseline_tok_s"));
    m.speedup = spread_from(j.at("speedup"));
    m.ms_per_token = j.at("ms_per_token").get<double>();
    m.ttft_ms = j.at("ttft_ms").get<double>();
    m.gamma = j.at("gamma").get<int64_t>();
    m.n_drafted = j.at("n_drafted").get<int64_t>();
    m.n_accepted = j.at("n_accepted").get<int64_t>();
    m.n_rounds = j.at("n_rounds").get<int64_t>();
    m.n_target_forwards = j.at("n_target_forwards").get<int64_t>();
    m.alpha = j.at("alpha").get<double>();
    m.tau = j.at("tau").get<double>();
    // Spec-Bench's figures (absent from records written before they existed: 0).
    m.mean_tok_s = j.value("mean_tok_s", 0.0);
    m.mean_baseline_tok_s = j.value("mean_baseline_tok_s", 0.0);
    m.mean_speedup = j.value("mean_speedup", 0.0);
    m.decode_speedup = j.value("decode_speedup", 0.0);
    m.acceptance_per_position = j.at("acceptance_per_position").get<std::vector<double>>();
    m.gamma_rounds = j.value("gamma_rounds", std::vector<int64_t>{});  // absent from older records
    m.n_aside_tokens = j.value("n_aside_tokens", int64_t{0});
    if (j.contains("per_drafter")) add_per_drafter(j.at("per_drafter"), m.per_drafter);
    m.n_forced = j.value("n_forced", int64_t{0});
    m.n_refused = j.value("n_refused", int64_t{0});
    m.n_jump_drafted = j.value("n_jump_drafted", int64_t{0});
    m.n_jump = j.value("n_jump", int64_t{0});
    m.draft_step_ms = j.at("draft_step_ms").get<double>();
    m.target_step_ms = j.at("target_step_ms").get<double>();
    m.cost_ratio = j.at("cost_ratio").get<double>();
    m.predicted_speedup = j.at("predicted_speedup").get<double>();
    m.measured_over_predicted = j.at("measured_over_predicted").get<double>();
    for (const auto& [k, c] : j.at("categories").items())
      m.categories[k] = {c.at("n_prompts").get<int64_t>(), c.at("tok_s").get<double>(), c.at("speedup").get<double>(),
                         c.value("mean_tok_s", 0.0), c.value("mean_baseline_tok_s", 0.0),
                         c.value("mean_speedup", 0.0), c.value("tau", 0.0)};
    for (const auto& c : j.at("checks"))
      m.checks.push_back({c.at("name").get<std::string>(), c.at("pass").get<bool>(), c.at("p_value").get<double>(),
                          c.at("significance").get<double>(), c.at("n_samples").get<int64_t>(),
                          c.at("detectable_tv").get<double>(), c.at("detail").get<std::string>()});
    m.wall_s = j.at("wall_s").get<double>();
    if (j.contains("phases")) m.phases = phases_from(j.at("phases"));
    if (j.contains("baseline_phases")) m.baseline_phases = phases_from(j.at("baseline_phases"));
    if (j.contains("load")) m.load = load_from_json(j.at("load"));
    if (j.contains("valid")) {
      m.n_constrained = j.at("valid").at("n_constrained").get<int64_t>();
      m.n_valid = j.at("valid").at("n_valid").get<int64_t>();
    }
  } catch (const json::exception& e) {
    fail("cell record ", j.contains("key") ? j["key"].dump() : std::string("(no key)"), ": ", e.what());
  }
  return m;
}

}  // namespace specdec::harness
