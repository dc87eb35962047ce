// A cell's figures from its samples.jsonl lines (metrics.h: cell_metrics, lines_of): the sums
// over each side's measured generations, and the cell's speedups, acceptance and phases from
// them. metrics.cpp reads and writes the records these figures go to.
#include <algorithm>
#include <array>
#include <utility>

#include "harness/metrics.h"
#include "harness/plan.h"
#include "harness/stats.h"

namespace specdec::harness {

using nlohmann::json;

namespace {

// Sums over one side's (candidate's or baseline's) measured generations of one cell.
struct Totals {
  int64_t n_generated = 0, n_drafted = 0, n_accepted = 0, n_rounds = 0, n_target_forwards = 0, n_draft_forwards = 0;
  int64_t n_tree_rounds = 0;
  int64_t n_constrained = 0, n_valid = 0;  // checks.valid (lines that carry "valid")
  double ms_decode = 0;
  int64_t n_decode_tokens = 0, n_tau_tokens = 0, n_tau_forwards = 0;
  PhaseBreakdown phases;
  std::vector<int64_t> accepted_pos, drafted_pos, gamma_rounds;
  int64_t n_aside_tokens = 0;
  CellMetrics::PerDrafter per_drafter;
  int64_t n_forced = 0;   // structured output's forced tokens (absent from lines without any)
  int64_t n_refused = 0;  // draft tokens its grammar refused (likewise)
  int64_t n_jump_drafted = 0, n_jump = 0;  // its jump-forward tokens, drafted and accepted (likewise)
  std::vector<double> ttft;

  // One measured generation, from its samples.jsonl line (see sample_line).
  void add(const json& line) {
    const json& st = line.at("stats");
    const int64_t gen = line.at("n_generated").get<int64_t>(), fwd = line.at("n_target_forwards").get<int64_t>();
    const double wall_ms = line.at("wall_ms").get<double>();
    const strategies::PhaseTimes ms = phase_ms_from(st.at("phase_ms"));
    const int64_t rounds = st.at("n_rounds").get<int64_t>();
    n_generated += gen;
    n_drafted += line.at("n_drafted").get<int64_t>();
    n_accepted += line.at("n_accepted").get<int64_t>();
    n_rounds += rounds;
    n_tree_rounds += st.at("n_tree_rounds").get<int64_t>();
    n_target_forwards += fwd;
    n_draft_forwards += st.at("n_draft_forwards").get<int64_t>();
    if (line.contains("valid")) {
      ++n_constrained;
      n_valid += line.at("valid").get<bool>() ? 1 : 0;
    }
    phases.ms += ms;
    phases.wall_ms += wall_ms;
    // A round is a verification round, or for autoregressive decoding one decode step.
    phases.n_rounds += rounds > 0 ? rounds : std::max<int64_t>(0, fwd - 1);
    ++phases.n_generations;
    // The prefill forward yields the first token; each later token costs decode time. (Not
    // wall - TTFT: beam search emits everything at the end, so its TTFT is its wall time.)
    if (gen >= 2) {
      ms_decode += wall_ms - ms.prefill;
      n_decode_tokens += gen - 1;
    }
    n_tau_tokens += gen;  // tau as strategies::Stats::tau(): per forward that yields tokens
    n_tau_forwards += rounds > 0 ? rounds : fwd;
    ttft.push_back(line.at("ttft_ms").get<double>());
    const auto acc = st.at("accepted_per_position").get<std::vector<int64_t>>();
    const auto dra = st.at("drafted_per_position").get<std::vector<int64_t>>();
    if (accepted_pos.size() < acc.size()) accepted_pos.resize(acc.size());
    if (drafted_pos.size() < dra.size()) drafted_pos.resize(dra.size());
    for (size_t i = 0; i < acc.size(); ++i) accepted_pos[i] += acc[i];
    for (size_t i = 0; i < dra.size(); ++i) drafted_pos[i] += dra[i];
    // The controller's decisions (absent from lines written before they existed).
    const auto chosen = st.value("gamma_rounds", std::vector<int64_t>{});
    if (gamma_rounds.size() < chosen.size()) gamma_rounds.resize(chosen.size());
    for (size_t i = 0; i < chosen.size(); ++i) gamma_rounds[i] += chosen[i];
    n_aside_tokens += st.value("n_aside_tokens", int64_t{0});
    if (st.contains("per_drafter")) add_per_drafter(st.at("per_drafter"), per_drafter);
    n_forced += st.value("n_forced", int64_t{0});
    n_refused += st.value("n_refused", int64_t{0});
    n_jump_drafted += st.value("n_jump_drafted", int64_t{0});
    n_jump += st.value("n_jump", int64_t{0});
  }
  double tau() const { return n_tau_forwards ? double(n_tau_tokens) / double(n_tau_forwards) : 0; }
};

Spread spread_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {stats::median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
          stats::quantile(v, 0.25), stats::quantile(v, 0.75)};
}

// A side's measured generations grouped the ways the figures need them.
struct SideFigures {
  Totals all;
  std::map<std::string, Totals> per_category;
  std::map<int64_t, std::array<double, 2>> per_repeat;                             // tokens, ms
  std::map<std::pair<int64_t, std::string>, std::array<double, 2>> per_repeat_category;
  std::map<std::pair<int64_t, std::string>, std::array<double, 2>> per_question;  // (repeat, prompt): all turns
  std::map<std::string, std::string> category_of;                                  // prompt -> category

  explicit SideFigures(const std::vector<const json*>& lines) {
    for (const json* l : lines) {
      const std::string prompt = l->at("prompt").get<std::string>(), cat = l->at("category").get<std::string>();
      const int64_t r = l->at("repeat").get<int64_t>();
      const double tok = double(l->at("n_generated").get<int64_t>()), ms = l->at("wall_ms").get<double>();
      all.add(*l);
      per_category[cat].add(*l);
      for (auto* v : {&per_repeat_category[{r, cat}], &per_question[{r, prompt}]}) (*v)[0] += tok, (*v)[1] += ms;
      // A batched repeat (batch_size > 1) took its batch's wall time, not the sum of its
      // sequences' overlapping ones: throughput = its tokens / that time.
      per_repeat[r][0] += tok;
      if (l->contains("batch_wall_ms")) per_repeat[r][1] = l->at("batch_wall_ms").get<double>();
      else per_repeat[r][1] += ms;
      category_of[prompt] = cat;
    }
  }
  static double tok_s(const std::array<double, 2>& v) { return 1000.0 * v[0] / std::max(v[1], 1e-9); }
  // Spec-Bench's speed: the mean over questions (and repeats) of tokens / wall time, every
  // turn of a question together. `category` empty: all questions.
  double mean_question_tok_s(const std::string& category = "") const {
    double sum = 0;
    int64_t n = 0;
    for (const auto& [key, v] : per_question)
      if (category.empty() || category_of.at(key.second) == category) sum += tok_s(v), ++n;
    return n ? sum / double(n) : 0;
  }
  double decode_tok_s() const { return all.ms_decode > 0 ? 1000.0 * double(all.n_decode_tokens) / all.ms_decode : 0; }
};

}  // namespace

// A cell's figures from the samples.jsonl lines of its measured generations (candidate and
// autoregressive baseline; `base` empty when the cell is its own baseline). Both interleave
// modes and resumed runs compute every figure here and nowhere else.
CellMetrics cell_metrics(const PlannedCell& pc, const std::vector<const json*>& cand_lines,
                         const std::vector<const json*>& base_lines) {
  CellMetrics m;
  m.cell = pc.cell;
  m.baseline = pc.baseline;
  const SideFigures cand(cand_lines), base(base_lines);
  const bool has_base = !base_lines.empty();
  const Totals& ct = cand.all;
  std::vector<double> cand_tps, base_tps, speedups;
  for (const auto& [r, v] : cand.per_repeat) {
    cand_tps.push_back(SideFigures::tok_s(v));
    if (!has_base || !base.per_repeat.count(r)) continue;
    base_tps.push_back(SideFigures::tok_s(base.per_repeat.at(r)));
    speedups.push_back(cand_tps.back() / std::max(base_tps.back(), 1e-12));
  }
  m.n_prompts = static_cast<int64_t>(cand.category_of.size());
  m.n_repeats = static_cast<int64_t>(cand.per_repeat.size());
  m.n_generated = ct.n_generated;
  m.n_constrained = ct.n_constrained;
  m.n_valid = ct.n_valid;
  m.tok_s = spread_of(cand_tps);
  m.baseline_tok_s = has_base ? spread_of(base_tps) : m.tok_s;
  m.speedup = has_base ? spread_of(speedups) : Spread{1, 1, 1, 1, 1};
  m.ms_per_token = ct.n_decode_tokens ? ct.ms_decode / ct.n_decode_tokens : 0;
  m.ttft_ms = stats::median(ct.ttft);
  m.phases = ct.phases;
  if (has_base) m.baseline_phases = base.all.phases;
  const SideFigures& ar = has_base ? base : cand;  // the autoregressive side
  m.mean_tok_s = cand.mean_question_tok_s();
  m.mean_baseline_tok_s = ar.mean_question_tok_s();
  m.mean_speedup = m.mean_tok_s / std::max(m.mean_baseline_tok_s, 1e-12);
  m.decode_speedup = cand.decode_tok_s() / std::max(ar.decode_tok_s(), 1e-12);
  for (const auto& [prompt, cat] : cand.category_of) ++m.categories[cat].n_prompts;
  for (auto& [name, c] : m.categories) {
    std::vector<double> tps, sp;
    for (const auto& [key, v] : cand.per_repeat_category) {
      if (key.second != name) continue;
      tps.push_back(SideFigures::tok_s(v));
      const auto b = ar.per_repeat_category.find(key);
      if (b != ar.per_repeat_category.end()) sp.push_back(tps.back() / std::max(SideFigures::tok_s(b->second), 1e-12));
    }
    c.tok_s = stats::median(tps);
    c.speedup = has_base ? stats::median(sp) : 1.0;
    c.mean_tok_s = cand.mean_question_tok_s(name);
    c.mean_baseline_tok_s = ar.mean_question_tok_s(name);
    c.mean_speedup = c.mean_tok_s / std::max(c.mean_baseline_tok_s, 1e-12);
    c.tau = cand.per_category.at(name).tau();
  }
  // Speculative statistics and the Leviathan et al. prediction.
  m.n_drafted = ct.n_drafted;
  m.n_accepted = ct.n_accepted;
  m.n_rounds = ct.n_rounds;
  m.n_target_forwards = ct.n_target_forwards;
  m.alpha = m.n_drafted ? double(m.n_accepted) / double(m.n_drafted) : 0;
  m.tau = ct.tau();
  m.gamma_rounds = ct.gamma_rounds;
  m.n_aside_tokens = ct.n_aside_tokens;
  m.per_drafter = ct.per_drafter;
  m.n_forced = ct.n_forced;
  m.n_refused = ct.n_refused;
  m.n_jump_drafted = ct.n_jump_drafted;
  m.n_jump = ct.n_jump;
  for (size_t i = 0; i < ct.drafted_pos.size(); ++i)
    m.acceptance_per_position.push_back(ct.drafted_pos[i] ? double(ct.accepted_pos[i]) / double(ct.drafted_pos[i]) : 0);
  while (!m.acceptance_per_position.empty() && ct.drafted_pos[m.acceptance_per_position.size() - 1] == 0)
    m.acceptance_per_position.pop_back();
  m.target_step_ms = ar.all.n_decode_tokens ? ar.all.ms_decode / ar.all.n_decode_tokens : 0;
  const int64_t draft_steps = ct.n_draft_forwards ? ct.n_draft_forwards : ct.n_drafted;
  m.draft_step_ms = draft_steps ? ct.phases.ms.draft / draft_steps : 0;
  m.cost_ratio = m.target_step_ms > 0 ? m.draft_step_ms / m.target_step_ms : 0;
  m.gamma = pc.needs.draft_length;
  // Leviathan et al.'s prediction models chains; for token trees alpha is per node and the
  // formula does not apply, so no prediction is made.
  if (m.gamma > 0 && m.n_drafted > 0 && ct.n_tree_rounds == 0) {
    m.predicted_speedup = stats::leviathan_speedup(m.alpha, m.gamma, m.cost_ratio);
    m.measured_over_predicted = m.predicted_speedup > 0 ? m.speedup.median / m.predicted_speedup : 0;
  }
  return m;
}

std::vector<const json*> lines_of(const std::vector<json>& samples, const std::string& cell, const std::string& role) {
  std::vector<const json*> out;
  for (const auto& j : samples)
    if (j.at("cell").get<std::string>() == cell && j.at("role").get<std::string>() == role) out.push_back(&j);
  return out;
}

}  // namespace specdec::harness
