#include "harness/metrics.h"

#include "core/error.h"

namespace specdec::harness {

using nlohmann::json;

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
}  // namespace

json to_json(const CellMetrics& m) {
  json checks = json::array();
  for (const auto& c : m.checks)
    checks.push_back({{"name", c.name}, {"pass", c.pass}, {"p_value", c.p_value}, {"significance", c.significance},
                      {"n_samples", c.n_samples}, {"detectable_tv", c.detectable_tv}, {"detail", c.detail}});
  json cats = json::object();
  for (const auto& [k, c] : m.categories)
    cats[k] = {{"n_prompts", c.n_prompts}, {"tok_s", c.tok_s}, {"speedup", c.speedup}};
  return {{"key", m.cell.key}, {"label", m.cell.label}, {"strategy", m.cell.strategy},
          {"params", m.cell.params}, {"point", m.cell.point}, {"baseline", m.baseline},
          {"n_prompts", m.n_prompts}, {"n_repeats", m.n_repeats}, {"n_generated", m.n_generated},
          {"tok_s", spread_json(m.tok_s)}, {"baseline_tok_s", spread_json(m.baseline_tok_s)},
          {"speedup", spread_json(m.speedup)}, {"ms_per_token", m.ms_per_token}, {"ttft_ms", m.ttft_ms},
          {"gamma", m.gamma}, {"n_drafted", m.n_drafted}, {"n_accepted", m.n_accepted}, {"n_rounds", m.n_rounds},
          {"n_target_forwards", m.n_target_forwards}, {"alpha", m.alpha}, {"tau", m.tau},
          {"acceptance_per_position", m.acceptance_per_position}, {"draft_step_ms", m.draft_step_ms},
          {"target_step_ms", m.target_step_ms}, {"cost_ratio", m.cost_ratio},
          {"predicted_speedup", m.predicted_speedup}, {"measured_over_predicted", m.measured_over_predicted},
          {"categories", cats}, {"checks", checks}, {"wall_s", m.wall_s}};
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
    m.acceptance_per_position = j.at("acceptance_per_position").get<std::vector<double>>();
    m.draft_step_ms = j.at("draft_step_ms").get<double>();
    m.target_step_ms = j.at("target_step_ms").get<double>();
    m.cost_ratio = j.at("cost_ratio").get<double>();
    m.predicted_speedup = j.at("predicted_speedup").get<double>();
    m.measured_over_predicted = j.at("measured_over_predicted").get<double>();
    for (const auto& [k, c] : j.at("categories").items())
      m.categories[k] = {c.at("n_prompts").get<int64_t>(), c.at("tok_s").get<double>(), c.at("speedup").get<double>()};
    for (const auto& c : j.at("checks"))
      m.checks.push_back({c.at("name").get<std::string>(), c.at("pass").get<bool>(), c.at("p_value").get<double>(),
                          c.at("significance").get<double>(), c.at("n_samples").get<int64_t>(),
                          c.at("detectable_tv").get<double>(), c.at("detail").get<std::string>()});
    m.wall_s = j.at("wall_s").get<double>();
  } catch (const json::exception& e) {
    fail("cell record ", j.contains("key") ? j["key"].dump() : std::string("(no key)"), ": ", e.what());
  }
  return m;
}

}  // namespace specdec::harness
