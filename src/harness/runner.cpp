// The experiment runner: models -> cells -> interleaved measurements -> checks -> commit.
#include "harness/runner.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstring>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "harness/checks.h"
#include "harness/load.h"
#include "harness/model_catalog.h"
#include "harness/paths.h"
#include "harness/planted_bug.h"
#include "harness/plan.h"
#include "harness/progress.h"
#include "harness/report.h"
#include "harness/results.h"
#include "harness/stats.h"
#include "harness/trace.h"
#include "model/causal_lm.h"
#include "model/device.h"
#include "model/prefix_reuse.h"
#include "strategies/registry.h"
#include "strategies/trace.h"
#include "tokenizer/tokenizer.h"

namespace specdec::harness {

namespace fs = std::filesystem;
namespace reg = specdec::strategies;
using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop.store(true); }

struct Interrupted {};

void check_interrupt() {
  if (g_stop.load()) throw Interrupted{};
}

}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}
bool stop_requested() { return g_stop.load(); }
void clear_stop_request() { g_stop.store(false); }

namespace {

struct Models {
  model::LoadedModel target;
  std::optional<model::LoadedModel> draft;
};

model::LoadedModel load_one(const ModelChoice& m, bool oversubscribe) {
  model::ModelSpec spec = resolve_model(m.name);
  spec.dtype = m.dtype;
  spec.threads = m.threads;
  spec.threads_oversubscribe = oversubscribe;
  spec.seed = m.seed;
  spec.device = m.device;
  spec.engine = m.engine;
  spec.graphs = m.graphs;
  return model::load(spec);
}

Models load_models(const ExperimentConfig& cfg, bool oversubscribe) {
  model::set_threads(cfg.target.threads, oversubscribe);
  Models m;
  m.target = load_one(cfg.target, oversubscribe);
  if (cfg.draft) {
    const auto& d = *cfg.draft;
    // Self-drafting: the same weights serve both roles; each strategy run has its own caches.
    const bool same = d.name == cfg.target.name && d.dtype == cfg.target.dtype && d.seed == cfg.target.seed &&
                      d.device == cfg.target.device && d.engine == cfg.target.engine &&
                      d.graphs == cfg.target.graphs;
    m.draft = same ? m.target : load_one(d, oversubscribe);
  }
  return m;
}

// What a model holds in memory and what it reads per decoded token (env.json "models").
json model_env(const model::LoadedModel& m) {
  return {{"name", m.spec.name},
          {"dtype", m.spec.dtype},
          {"resident_weight_bytes", m.model->resident_weight_bytes()},
          {"streamed_weight_bytes_per_token", m.model->weight_bytes()}};
}

json memory_env() {
  const MemoryUsage mem = read_memory_usage();
  return {{"rss_bytes", mem.rss_bytes}, {"peak_rss_bytes", mem.peak_rss_bytes}};
}

struct EncodedPrompt {
  const PromptItem* item;  // its text and follow-up turns
  Tokens tokens;           // the first turn, encoded
};

// Tokenizer-less models (tiny random ones) read the prompt's bytes modulo the vocabulary.
Tokens encode_prompt(const PromptItem& p, const model::LoadedModel& m) {
  if (!m.tokenizer) {
    Tokens t;
    const int64_t v = m.model->config().n_vocab;
    for (unsigned char c : p.text) t.push_back(static_cast<TokenId>(c % v));
    return t;
  }
  const std::string text = p.chat ? m.tokenizer->apply_chat_template({{"user", p.text}}, true) : p.text;
  return m.tokenizer->encode(text, true);
}

std::string decode_text(const Tokens& t, const model::LoadedModel& m) {
  if (m.tokenizer) return m.tokenizer->decode(t, true);
  std::string s;
  for (TokenId id : t) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Sums over one side's (candidate's or baseline's) measured generations of one cell.
struct Totals {
  int64_t n_generated = 0, n_drafted = 0, n_accepted = 0, n_rounds = 0, n_target_forwards = 0, n_draft_forwards = 0;
  int64_t n_tree_rounds = 0;
  double ms_decode = 0;
  int64_t n_decode_tokens = 0, n_tau_tokens = 0, n_tau_forwards = 0;
  PhaseBreakdown phases;
  std::vector<int64_t> accepted_pos, drafted_pos;
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

// A cell's figures from the samples.jsonl lines of its measured generations (candidate and
// autoregressive baseline; `base` empty when the cell is its own baseline). Both interleave
// modes and resumed runs compute every figure here and nowhere else.
CellMetrics cell_metrics(const PlannedCell& pc, const std::vector<const json*>& cand_lines,
                         const std::vector<const json*>& base_lines, bool has_draft) {
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
  for (size_t i = 0; i < ct.drafted_pos.size(); ++i)
    m.acceptance_per_position.push_back(ct.drafted_pos[i] ? double(ct.accepted_pos[i]) / double(ct.drafted_pos[i]) : 0);
  while (!m.acceptance_per_position.empty() && ct.drafted_pos[m.acceptance_per_position.size() - 1] == 0)
    m.acceptance_per_position.pop_back();
  m.target_step_ms = ar.all.n_decode_tokens ? ar.all.ms_decode / ar.all.n_decode_tokens : 0;
  const int64_t draft_steps = ct.n_draft_forwards ? ct.n_draft_forwards : ct.n_drafted;
  m.draft_step_ms = draft_steps ? ct.phases.ms.draft / draft_steps : 0;
  m.cost_ratio = m.target_step_ms > 0 ? m.draft_step_ms / m.target_step_ms : 0;
  m.gamma = reg::strategy_needs(pc.cell.strategy, pc.resolved, has_draft).draft_length;
  // Leviathan et al.'s prediction models chains; for token trees alpha is per node and the
  // formula does not apply, so no prediction is made.
  if (m.gamma > 0 && m.n_drafted > 0 && ct.n_tree_rounds == 0) {
    m.predicted_speedup = stats::leviathan_speedup(m.alpha, m.gamma, m.cost_ratio);
    m.measured_over_predicted = m.predicted_speedup > 0 ? m.speedup.median / m.predicted_speedup : 0;
  }
  return m;
}

// Greedy equality from the sample lines of repeat 0: every candidate turn against the
// baseline's turn of the same prompt, token for token.
CheckOutcome greedy_equality(const std::vector<const json*>& cand_lines, const std::vector<const json*>& base_lines) {
  auto by_turn = [](const std::vector<const json*>& lines) {
    std::vector<std::pair<std::string, Tokens>> out;
    for (const json* l : lines) {
      if (l->at("repeat").get<int64_t>() != 0) continue;
      const int64_t turn = l->value("turn", int64_t{0});
      out.emplace_back(l->at("prompt").get<std::string>() + (turn ? " turn " + std::to_string(turn + 1) : ""),
                       l->at("tokens").get<Tokens>());
    }
    return out;
  };
  const auto cand = by_turn(cand_lines), base = by_turn(base_lines);
  std::map<std::string, Tokens> base_of(base.begin(), base.end());
  std::vector<std::string> ids;
  std::vector<Tokens> b, c;
  for (const auto& [id, toks] : cand) {
    ids.push_back(id);
    c.push_back(toks);
    b.push_back(base_of.count(id) ? base_of.at(id) : Tokens{});
  }
  return greedy_equality_check(ids, b, c);
}

std::vector<const json*> lines_of(const std::vector<json>& samples, const std::string& cell, const std::string& role) {
  std::vector<const json*> out;
  for (const auto& j : samples)
    if (j.at("cell").get<std::string>() == cell && j.at("role").get<std::string>() == role) out.push_back(&j);
  return out;
}

class CellRunner {
 public:
  CellRunner(const ExperimentConfig& cfg, const Models& models, const std::vector<EncodedPrompt>& prompts,
             Progress& progress)
      : cfg_(cfg), models_(models), prompts_(prompts), progress_(progress) {}

  // interleave: cell: one cell with its own interleaved baseline, checks included.
  CellMetrics run(const PlannedCell& pc, std::vector<json>& samples);
  // interleave: prompt: one prompt (all its turns) of one side; appends one line per turn.
  void converse(reg::Strategy& s, const std::string& cell_key, const std::string& role, size_t prompt,
                int64_t repeat, std::vector<json>& samples);
  // One unrecorded generation on the first prompt; batch_size > 1: one batch of the first prompts.
  void warmup(reg::Strategy& s, int64_t batch_size = 1);
  // strategies[i].trace: one untimed, recorded generation of the cell on the first prompt's
  // first turn (the seed of its first measured repeat), written as a trace page + JSON.
  void trace(const PlannedCell& pc, const std::string& html_path);

 private:
  struct Timed {
    reg::Result result;
    double wall_ms = 0, ttft_ms = 0;
  };
  // candidate: a request of the checked strategy (it verifies through planted_ when set).
  reg::Request request(const Tokens& prompt, uint64_t seed, int64_t max_new, bool candidate = false) const;
  Timed generate(reg::Strategy& s, const reg::Request& req, const std::string& what);
  // One Timed per request, batch_size at a time through Strategy::generate_batch (1: generate()
  // one after another), `per_call` requests per call (0: all in one, so the batch never drains
  // between calls; checks use a few batches' worth, so an interrupt is seen soon). A Timed's wall
  // and TTFT are its sequence's, from when it joined the batch.
  std::vector<Timed> generate_many(reg::Strategy& s, const std::vector<reg::Request>& reqs, int64_t batch_size,
                                   const std::string& what, size_t per_call);
  json sample_line(const std::string& cell_key, const std::string& role, const EncodedPrompt& p, int64_t repeat,
                   uint64_t seed, const Timed& t) const;
  void measure(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples);
  // batch_size > 1: every prompt of a repeat in one batched call per side.
  void measure_batch(reg::Strategy& s, const PlannedCell& pc, const std::string& role, int64_t repeat,
                     std::vector<json>& samples);
  void sampling_checks(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples);
  static std::vector<double> first_token_probs(model::CausalLM& target, const Tokens& prompt,
                                               const sampling::ProcessorConfig& proc);
  // Raw target log-likelihood of the first `length` tokens of each generation after `prompt`,
  // `batch` generations per ragged forward (1: one forward each).
  static std::vector<double> logliks(model::CausalLM& target, const Tokens& prompt, const std::vector<Tokens>& gens,
                                     int64_t length, int64_t batch);

  const ExperimentConfig& cfg_;
  const Models& models_;
  const std::vector<EncodedPrompt>& prompts_;
  Progress& progress_;
  std::shared_ptr<kernels::Backend> planted_;  // checks.inject_residual_bug: the candidate's backend
};

reg::Request CellRunner::request(const Tokens& prompt, uint64_t seed, int64_t max_new, bool candidate) const {
  reg::Request req;
  req.prompt = prompt;
  req.target = models_.target.model;
  if (models_.draft) {
    req.draft = models_.draft->model;
    req.draft_tokenizer = models_.draft->tokenizer;
  }
  req.tokenizer = models_.target.tokenizer;
  req.stop.max_new_tokens = max_new;
  if (cfg_.eos && req.tokenizer) req.stop.eos_ids = req.tokenizer->eos_ids();
  req.stop.stop_strings = cfg_.stop;
  req.stop.timeout_s = cfg_.timeout_s;
  req.seed = seed;
  if (candidate) req.backend = planted_;
  return req;
}

CellRunner::Timed CellRunner::generate(reg::Strategy& s, const reg::Request& req, const std::string& what) {
  check_interrupt();
  Timed t;
  Stopwatch clock;
  bool first = true;
  t.result = s.generate(req, [&](const Tokens& toks, const std::string&) {
    if (first && !toks.empty()) {
      t.ttft_ms = clock.ms();
      first = false;
    }
  });
  t.wall_ms = clock.ms();
  if (first) t.ttft_ms = t.result.stats.ms_first_token > 0 ? t.result.stats.ms_first_token : t.wall_ms;
  progress_.step(what);
  return t;
}

std::vector<CellRunner::Timed> CellRunner::generate_many(reg::Strategy& s, const std::vector<reg::Request>& reqs,
                                                         int64_t batch_size, const std::string& what,
                                                         size_t per_call) {
  std::vector<Timed> out;
  const auto label = [&](size_t i) { return what + " " + std::to_string(i + 1) + "/" + std::to_string(reqs.size()); };
  if (batch_size <= 1) {
    for (size_t i = 0; i < reqs.size(); ++i) out.push_back(generate(s, reqs[i], label(i)));
    return out;
  }
  const size_t chunk = per_call > 0 ? per_call : reqs.size();
  for (size_t i0 = 0; i0 < reqs.size(); i0 += chunk) {
    check_interrupt();
    const std::vector<reg::Request> part(reqs.begin() + i0, reqs.begin() + std::min(reqs.size(), i0 + chunk));
    for (reg::Result& r : s.generate_batch(part, {batch_size, 0}, {})) {
      Timed t;
      t.wall_ms = r.stats.ms_total;
      t.ttft_ms = r.stats.ms_first_token > 0 ? r.stats.ms_first_token : t.wall_ms;
      t.result = std::move(r);
      out.push_back(std::move(t));
      progress_.step(label(out.size() - 1));
    }
  }
  return out;
}

json CellRunner::sample_line(const std::string& cell_key, const std::string& role, const EncodedPrompt& p,
                             int64_t repeat, uint64_t seed, const Timed& t) const {
  const auto& s = t.result.stats;
  json j = {{"cell", cell_key}, {"role", role}, {"prompt", p.item->id}, {"category", p.item->category},
            {"repeat", repeat}, {"seed", seed}, {"n_prompt", s.n_prompt}, {"n_generated", s.n_generated},
            {"finish", reg::to_string(t.result.finish)}, {"wall_ms", t.wall_ms}, {"ttft_ms", t.ttft_ms},
            {"tokens", t.result.tokens}};
  if (!p.item->subcategory.empty()) j["subcategory"] = p.item->subcategory;
  if (role == "baseline" || role == "candidate") {
    j["text"] = t.result.text.empty() ? decode_text(t.result.tokens, models_.target) : t.result.text;
    j["n_target_forwards"] = s.n_target_forwards;
    j["n_drafted"] = s.n_drafted;
    j["n_accepted"] = s.n_accepted;
    // Everything the cell's figures are computed from (cell_metrics reads it back).
    j["stats"] = {{"n_draft_forwards", s.n_draft_forwards}, {"n_rounds", s.n_rounds},
                  {"n_tree_rounds", s.n_tree_rounds}, {"verify_modes", s.verify_mode_rounds},
                  {"accepted_per_position", s.accepted_per_position},
                  {"drafted_per_position", s.drafted_per_position}, {"phase_ms", to_json(s.phase_ms)}};
    if (!s.drafter_stats.empty()) j["drafter_stats"] = s.drafter_stats;
    if (!s.synthetic_acceptance.empty()) j["synthetic_acceptance"] = s.synthetic_acceptance;
  }
  return j;
}

uint64_t measure_seed(uint64_t base, int64_t repeat, size_t prompt) {
  return base + 1000 * static_cast<uint64_t>(repeat) + prompt;
}

void CellRunner::trace(const PlannedCell& pc, const std::string& html_path) {
  auto s = reg::create(pc.cell.strategy, pc.resolved);
  const uint64_t seed = measure_seed(cfg_.seed, 0, 0);
  reg::Request req = request(prompts_[0].tokens, seed, cfg_.max_new_tokens);
  req.trace = std::make_shared<reg::TraceRecorder>(models_.target.tokenizer, pc.resolved);
  const reg::Result r = s->generate(req, {});
  const json what = {{"model", cfg_.target.name}, {"draft", cfg_.draft ? cfg_.draft->name : ""},
                     {"strategy", pc.cell.strategy}, {"cell", pc.cell.key}, {"params", pc.resolved.values()},
                     {"params_set", pc.cell.params}, {"seed", seed}, {"prompt", prompts_[0].item->text},
                     {"prompt_id", prompts_[0].item->id}, {"n_prompt", req.prompt.size()}};
  write_trace(html_path, trace_document(what, r, pc.cell.strategy, *req.trace));
}

void CellRunner::converse(reg::Strategy& s, const std::string& cell_key, const std::string& role, size_t prompt,
                          int64_t repeat, std::vector<json>& samples) {
  const EncodedPrompt& p = prompts_[prompt];
  const auto& tok = models_.target.tokenizer;
  std::vector<tokenizer::ChatMessage> chat = {{"user", p.item->text}};
  Tokens ids = p.tokens;
  const size_t n_turns = 1 + p.item->follow_ups.size();
  for (size_t k = 0;; ++k) {
    const uint64_t seed = measure_seed(cfg_.seed, repeat, prompt) + 1000003 * k;
    std::string what = "prompt " + std::to_string(prompt + 1) + "/" + std::to_string(prompts_.size());
    if (n_turns > 1) what += " turn " + std::to_string(k + 1) + "/" + std::to_string(n_turns);
    what += " repeat " + std::to_string(repeat + 1) + "/" + std::to_string(cfg_.repeats);
    const Timed t = generate(s, request(ids, seed, cfg_.max_new_tokens, role == "candidate"), what);
    samples.push_back(sample_line(cell_key, role, p, repeat, seed, t));
    if (k > 0) samples.back()["turn"] = k;
    if (k + 1 == n_turns) return;
    // The next turn is asked after this answer, as Spec-Bench does (the model sees its own
    // answer, re-encoded through the chat template). Tokenizer-less models append raw ids.
    const std::string& next = p.item->follow_ups[k];
    if (tok) {
      chat.push_back({"assistant", samples.back().at("text").get<std::string>()});
      chat.push_back({"user", next});
      ids = tok->encode(tok->apply_chat_template(chat, true), true);
    } else {
      ids.insert(ids.end(), t.result.tokens.begin(), t.result.tokens.end());
      PromptItem turn;
      turn.text = next;
      const Tokens more = encode_prompt(turn, models_.target);
      ids.insert(ids.end(), more.begin(), more.end());
    }
  }
}

void CellRunner::warmup(reg::Strategy& s, int64_t batch_size) {  // warms caches and allocators; not recorded
  if (batch_size <= 1) {
    generate(s, request(prompts_[0].tokens, cfg_.seed, cfg_.max_new_tokens), "warmup");
    return;
  }
  std::vector<reg::Request> reqs;
  for (size_t i = 0; i < std::min(prompts_.size(), static_cast<size_t>(batch_size)); ++i)
    reqs.push_back(request(prompts_[i].tokens, cfg_.seed, cfg_.max_new_tokens));
  check_interrupt();
  s.generate_batch(reqs, {batch_size, 0}, {});
  progress_.step("warmup");
}

void CellRunner::measure_batch(reg::Strategy& s, const PlannedCell& pc, const std::string& role, int64_t repeat,
                               std::vector<json>& samples) {
  std::vector<reg::Request> reqs;
  for (size_t i = 0; i < prompts_.size(); ++i)
    reqs.push_back(request(prompts_[i].tokens, measure_seed(cfg_.seed, repeat, i), cfg_.max_new_tokens,
                           role == "candidate"));
  Stopwatch clock;
  const std::vector<Timed> runs = generate_many(s, reqs, pc.batch_size,
                                                role + " repeat " + std::to_string(repeat + 1) + "/" +
                                                    std::to_string(cfg_.repeats) + " prompt",
                                                0);
  const double batch_wall_ms = clock.ms();
  for (size_t i = 0; i < runs.size(); ++i) {
    samples.push_back(sample_line(pc.cell.key, role, prompts_[i], repeat, reqs[i].seed, runs[i]));
    samples.back()["batch_size"] = pc.batch_size;
    samples.back()["batch_wall_ms"] = batch_wall_ms;  // the repeat's throughput is over this (SideFigures)
  }
}

void CellRunner::measure(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples) {
  auto cand = reg::create(pc.cell.strategy, pc.resolved);
  std::unique_ptr<reg::Strategy> base;
  if (!pc.baseline.empty()) base = reg::create(pc.baseline, pc.baseline_params);
  if (pc.batch_size > 1)
    SD_CHECK(models_.target.model->ragged_batches(), cfg_.file, ": cell ", pc.cell.key, ": batch_size ",
             pc.batch_size, " needs a target that takes ragged batches (a Llama-architecture model, on either "
             "engine); this one does not (use batch_size 1)");
  for (int64_t w = 0; w < cfg_.warmup; ++w) {
    if (base) warmup(*base, pc.batch_size);
    warmup(*cand, pc.batch_size);
  }
  for (int64_t r = 0; r < cfg_.repeats; ++r) {
    if (pc.batch_size > 1) {  // interleaved per repeat: the baseline's batch, then the candidate's
      if (base) measure_batch(*base, pc, "baseline", r, samples);
      measure_batch(*cand, pc, "candidate", r, samples);
      continue;
    }
    for (size_t i = 0; i < prompts_.size(); ++i) {
      // Interleaved: the baseline runs right before the candidate on the same prompt and seed.
      if (base) converse(*base, pc.cell.key, "baseline", i, r, samples);
      converse(*cand, pc.cell.key, "candidate", i, r, samples);
    }
  }
  m = cell_metrics(pc, lines_of(samples, pc.cell.key, "candidate"), lines_of(samples, pc.cell.key, "baseline"),
                   models_.draft.has_value());
}

std::vector<double> CellRunner::first_token_probs(model::CausalLM& target, const Tokens& prompt,
                                                  const sampling::ProcessorConfig& proc) {
  model::KVCache cache = target.make_cache(1, static_cast<int64_t>(prompt.size()) + 1);
  const at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong).view({1, -1});
  const at::Tensor logits = target.forward(ids, {0}, cache);  // [1, T, V]
  const at::Tensor last = logits[0].narrow(0, logits.size(1) - 1, 1).contiguous();  // [1, V]
  const at::Tensor p = model::on_host(sampling::probabilities(last, proc, prompt)).to(at::kDouble).contiguous();  // [1, V]
  const double* d = p.data_ptr<double>();
  return std::vector<double>(d, d + p.numel());
}

// Raw (unprocessed) target log-likelihoods. Every row of the packed engine's forward is computed
// alone, so a batched value equals the one-at-a-time value bit for bit.
std::vector<double> CellRunner::logliks(model::CausalLM& target, const Tokens& prompt, const std::vector<Tokens>& gens,
                                        int64_t length, int64_t batch) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  std::vector<double> out;
  for (size_t i0 = 0; i0 < gens.size(); i0 += static_cast<size_t>(batch)) {
    check_interrupt();
    const int64_t B = std::min<int64_t>(batch, static_cast<int64_t>(gens.size() - i0));
    std::vector<int64_t> n(B);
    int64_t T = P;
    for (int64_t b = 0; b < B; ++b) {
      n[b] = std::min<int64_t>(length, static_cast<int64_t>(gens[i0 + b].size()));
      T = std::max(T, P + n[b]);
    }
    if (B == 1 && n[0] == 0) {
      out.push_back(0);
      continue;
    }
    at::Tensor ids = at::zeros({B, T}, at::kLong);  // [B, T]: prompt + generation, ragged
    model::ForwardOptions opt;
    for (int64_t b = 0; b < B; ++b) {
      int64_t* row = ids.data_ptr<int64_t>() + b * T;
      std::copy(prompt.begin(), prompt.end(), row);
      std::copy(gens[i0 + b].begin(), gens[i0 + b].begin() + n[b], row + P);
      if (B > 1) opt.n_fed.push_back(P + n[b]);
    }
    model::KVCache cache = target.make_cache(B, T);
    const at::Tensor logits = target.forward(ids, std::vector<int64_t>(B, 0), cache, opt).logits;  // [B, T, V]
    for (int64_t b = 0; b < B; ++b) {
      if (n[b] == 0) {
        out.push_back(0);
        continue;
      }
      const at::Tensor lp = at::log_softmax(logits[b].narrow(0, P - 1, n[b]).to(at::kDouble), -1);  // [n, V]
      const Tokens& g = gens[i0 + b];
      const at::Tensor tgt = at::tensor(std::vector<int64_t>(g.begin(), g.begin() + n[b]), at::kLong).view({-1, 1});
      out.push_back(lp.gather(1, tgt).sum().item<double>());
    }
  }
  return out;
}

void CellRunner::sampling_checks(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples) {
  const auto& k = cfg_.checks;
  if (!k.first_token && !k.sequence) return;
  const auto& p = prompts_[0];
  const int64_t len = std::max<int64_t>(2, k.sequence_length);  // >= 2 so the first token is drafted
  auto cand = reg::create(pc.cell.strategy, pc.resolved);
  auto base = reg::create("sampling", pc.baseline_params);
  // Every check run starts from this prompt, so its prefill is computed once per model and
  // copied (model/prefix_reuse.h): the same logits, a fraction of the time. (Only the checks:
  // the measured generations pay their prefill.)
  const std::vector<int64_t> prefix(p.tokens.begin(), p.tokens.end());
  auto target = std::make_shared<model::PrefixReuse>(models_.target.model, prefix);
  std::shared_ptr<model::CausalLM> draft;
  if (models_.draft)
    draft = models_.draft->model == models_.target.model
                ? target
                : std::make_shared<model::PrefixReuse>(models_.draft->model, prefix);
  auto check_req = [&](uint64_t seed, bool candidate) {
    reg::Request r = request(p.tokens, seed, len, candidate);
    r.target = target;
    if (draft) r.draft = draft;
    return r;
  };
  // The samples are drawn in batches (checks.batch_size) where the target takes ragged batches;
  // each sample's tokens are its batch-1 generation's either way (strategy.h: generate_batch).
  const int64_t batch = target->ragged_batches() ? k.batch_size : 1;
  const int64_t n_cand = std::max(k.first_token ? k.first_token_samples : 0, k.sequence ? k.sequence_samples : 0);
  std::vector<Tokens> cand_seqs, base_seqs;
  std::vector<TokenId> first;
  std::vector<reg::Request> reqs;
  for (int64_t j = 0; j < n_cand; ++j) reqs.push_back(check_req(cfg_.seed + 1000003 + static_cast<uint64_t>(j), true));
  const std::vector<Timed> cand_runs = generate_many(*cand, reqs, batch, "check sample",
                                                     static_cast<size_t>(4 * batch));
  for (size_t j = 0; j < cand_runs.size(); ++j) {
    const Timed& t = cand_runs[j];
    SD_CHECK(!t.result.tokens.empty(), "check run of ", pc.cell.key, " generated no token");
    first.push_back(t.result.tokens[0]);
    cand_seqs.push_back(t.result.tokens);
    samples.push_back(sample_line(pc.cell.key, "check_candidate", p, 0, reqs[j].seed, t));
  }
  if (k.first_token) {
    const auto probs = first_token_probs(*target, p.tokens, reg::processor_config(pc.resolved));
    std::vector<TokenId> ft(first.begin(), first.begin() + k.first_token_samples);
    auto out = first_token_check(probs, ft, k.first_token_top_k, k.significance);
    out.detail = "prompt " + p.item->id + "; " + out.detail;
    m.checks.push_back(out);
  }
  if (!k.sequence) return;
  reqs.clear();
  for (int64_t j = 0; j < k.sequence_samples; ++j)  // seeds independent of the candidate's
    reqs.push_back(check_req(cfg_.seed + 2000003 + static_cast<uint64_t>(j), false));
  const std::vector<Timed> base_runs = generate_many(*base, reqs, batch, "check baseline", static_cast<size_t>(4 * batch));
  for (int64_t j = 0; j < k.sequence_samples; ++j) {
    const Timed& t = base_runs[static_cast<size_t>(j)];
    base_seqs.push_back(t.result.tokens);
    samples.push_back(sample_line(pc.cell.key, "check_baseline", p, 0, reqs[static_cast<size_t>(j)].seed, t));
  }
  cand_seqs.resize(static_cast<size_t>(k.sequence_samples));
  const std::vector<double> ll_base = logliks(*target, p.tokens, base_seqs, len, batch);
  const std::vector<double> ll_cand = logliks(*target, p.tokens, cand_seqs, len, batch);
  auto out = sequence_check(base_seqs, cand_seqs, ll_base, ll_cand, len, k.significance);
  out.detail = "prompt " + p.item->id + "; " + out.detail;
  m.checks.push_back(out);
}

CellMetrics CellRunner::run(const PlannedCell& pc, std::vector<json>& samples) {
  planted_ = nullptr;
  if (cfg_.checks.inject_residual_bug && pc.checked) {
    // The self-check: the checked strategy verifies through a backend that emits wrong
    // correction tokens (planted_bug.h); a working check must flag it.
    SD_CHECK(!reg::strategy_needs(pc.cell.strategy, pc.resolved, models_.draft.has_value()).drafter.empty(),
             "checks.inject_residual_bug: strategy '", pc.cell.strategy,
             "' verifies no drafts, so there is no residual to plant the bug in");
    planted_ = residual_bug_backend(model::backend_of(models_.target.model->device()));
  }
  Stopwatch clock;
  CellMetrics m;
  LoadMonitor load;  // the speed figures come from measure(): judge the machine's load there
  load.start();
  measure(pc, m, samples);
  m.load = load.stop();
  if (pc.checked && pc.greedy && cfg_.checks.greedy_equality && pc.baseline == "greedy") {
    m.checks.push_back(greedy_equality(lines_of(samples, pc.cell.key, "candidate"),
                                       lines_of(samples, pc.cell.key, "baseline")));
  } else if (pc.checked && !pc.greedy) {
    sampling_checks(pc, m, samples);
  }
  m.wall_s = clock.seconds();
  return m;
}

// ---- run folder ------------------------------------------------------------------------

std::string open_run_dir(const ExperimentConfig& cfg, const RunOptions& opt) {
  const std::string yaml = to_yaml(cfg);
  if (opt.resume) {
    const std::string dir = !opt.out_dir.empty() ? opt.out_dir : latest_run_dir(opt.results_root, cfg.name);
    SD_CHECK(!dir.empty(), "--resume: no earlier run of '", cfg.name, "' under ", opt.results_root, "/", cfg.name);
    std::ifstream in(fs::path(dir) / "config.yaml");
    SD_CHECK(in, "--resume: '", dir, "' has no config.yaml (not a run folder)");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string diff = first_difference(ss.str(), yaml);
    SD_CHECK(diff.empty(), "--resume: the experiment differs from the run in '", dir, "' (", diff,
             "); start a new run instead");
    return dir;
  }
  const std::string dir = !opt.out_dir.empty() ? opt.out_dir : new_run_dir(opt.results_root, cfg.name);
  SD_CHECK(!fs::exists(fs::path(dir) / "cells.jsonl"), "'", dir,
           "' already holds a run; pass --resume to continue it or choose another --out");
  RunStore store(dir);
  write_atomic(store.path("config.yaml"), yaml);
  return dir;
}

std::vector<std::string> make_plots(const std::string& run_dir) {
  const std::string script = (fs::path(source_root()) / "scripts" / "plot_results.py").string();
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string cmd = python + " '" + script + "' '" + run_dir + "' >/dev/null 2>'" +
                          (fs::path(run_dir) / "plots.log").string() + "'";
  if (std::system(cmd.c_str()) != 0)
    log::warn("plotting failed (see ", (fs::path(run_dir) / "plots.log").string(), "); results are complete");
  std::vector<std::string> pngs;
  for (const char* name : {"speedup_vs_gamma.png", "acceptance_by_position.png", "tok_s_per_strategy.png",
                           "speedup_per_category.png"})
    if (fs::exists(fs::path(run_dir) / name)) pngs.push_back(name);
  return pngs;
}

void write_outputs(const RunStore& store, const RunInfo& info, const std::vector<CellMetrics>& cells,
                   const std::vector<std::string>& plots) {
  write_atomic(store.path("metrics.json"), metrics_json(info, cells).dump(2) + "\n");
  write_atomic(store.path("summary.csv"), summary_csv(cells));
  write_atomic(store.path("report.md"), report_markdown(info, cells, plots));
}

// report.context: the markdown appended to report.md (published figures for context).
std::string read_context(const ExperimentConfig& cfg) {
  if (cfg.report_context.empty()) return "";
  std::ifstream in(resolve_data_path(cfg.report_context, cfg.file));
  SD_CHECK(in, cfg.file, ": report.context: cannot read '", cfg.report_context, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json torch_env(json env) {
  env["libtorch_version"] = TORCH_VERSION;
  const std::string conf = at::show_config();
  std::string blas = "unknown";
  for (const char* key : {"BLAS_INFO=", "LAPACK_INFO="}) {
    const auto pos = conf.find(key);
    if (pos == std::string::npos) continue;
    blas = conf.substr(pos + std::strlen(key), conf.find_first_of(",\n", pos) - pos - std::strlen(key));
    break;
  }
  // Debian's LibTorch reports the generic BLAS it was built against; which library runs is
  // chosen by the libblas.so.3 alternative (OpenBLAS-openmp after scripts/setup.sh).
  std::error_code ec;
  const auto target = std::filesystem::read_symlink("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", ec);
  if (!ec) blas += " -> " + target.string();
  env["blas"] = blas;
  env["intra_op_threads"] = at::get_num_threads();  // ATen's own pool (kept at 1: core/parallel.h)
  // The engine's threads as running, not as configured ("threads"): what the figures used.
  env["threads_in_use"] = parallel::num_threads();
  return env;
}

// Run-level load: the 1-minute load average around the run and how many finished cells
// (resumed ones included) were measured on a contended machine.
json load_summary(double loadavg_start, const std::vector<CellMetrics>& cells) {
  int64_t n_contended = 0, n_unknown = 0;
  double max_foreign = -1;
  for (const auto& c : cells) {
    n_contended += c.load.contended();
    n_unknown += !c.load.contended() && !c.load.quiet();
    max_foreign = std::max(max_foreign, c.load.foreign_cores);
  }
  return {{"loadavg_start", loadavg_start}, {"loadavg_end", read_load_snapshot().loadavg_1m},
          {"n_cells", cells.size()}, {"n_cells_contended", n_contended}, {"n_cells_load_unknown", n_unknown},
          {"max_foreign_cores", max_foreign}, {"contended_foreign_cores", kContendedForeignCores},
          {"contended_steal_fraction", kContendedStealFraction}};
}

// Everything a run needs once its folder is open and its models are loaded.
struct RunContext {
  const ExperimentConfig& cfg;
  const Plan& plan;
  RunStore store;
  RunInfo info;
  Progress& progress;
  CellRunner& runner;
  bool has_draft;
};

// strategies[i].trace: traces/<cell>.html (+ .json) for each traced cell, after the
// measurements (a trace already there, from a resumed run, is kept).
void write_traces(RunContext& ctx) {
  for (const auto& pc : ctx.plan.cells) {
    if (!pc.cell.trace) continue;
    std::string name = pc.cell.key;
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' && ch != '_') ch = '_';
    const fs::path html = fs::path(ctx.store.path("traces")) / (name.substr(0, 200) + ".html");
    if (fs::exists(html)) continue;
    fs::create_directories(html.parent_path());
    ctx.runner.trace(pc, html.string());
    log::info("trace: wrote ", html.string());
  }
}

// interleave: cell: cells one after another, each committed when finished.
void run_by_cell(RunContext& ctx, std::vector<CellMetrics>& done, RunOutcome& out) {
  std::set<std::string> finished;
  for (const auto& c : done) finished.insert(c.cell.key);
  for (size_t i = 0; i < ctx.plan.cells.size(); ++i) {
    const auto& pc = ctx.plan.cells[i];
    if (finished.count(pc.cell.key)) {
      ctx.progress.skip_cell(pc.n_generations);
      continue;
    }
    ctx.progress.start_cell(static_cast<int64_t>(i), pc.cell.label + " " + format_params(pc.cell.point));
    std::vector<json> samples;
    CellMetrics m;
    try {
      m = ctx.runner.run(pc, samples);
    } catch (const Interrupted&) {
      out.interrupted = true;
      return;
    }
    ctx.store.commit_cell(samples, m);  // durable before anything else refers to it
    done.push_back(m);
    write_outputs(ctx.store, ctx.info, done, {});
    char line[384];
    const std::string load_note = m.load.contended() ? ", CONTENDED: " + m.load.describe() : "";
    std::snprintf(line, sizeof line, "%s %s: %.2f tok/s, speedup %.3f, alpha %.3f%s%s", pc.cell.label.c_str(),
                  format_params(pc.cell.point).c_str(), m.tok_s.median, m.speedup.median, m.alpha,
                  m.checks.empty() ? "" : (m.checks_passed() ? ", checks pass" : ", CHECKS FAIL"), load_note.c_str());
    ctx.progress.finish_cell(line);
  }
}

// interleave: prompt (Spec-Bench's layout): on each prompt the shared baseline, then every
// cell. A unit (one repeat of one prompt, every side) is committed when finished; the cells'
// figures are recomputed from all committed samples after each unit.
void run_by_prompt(RunContext& ctx, std::vector<CellMetrics>& done, RunOutcome& out) {
  const auto& cfg = ctx.cfg;
  const std::string base_key = "baseline";
  std::set<std::string> finished;
  std::vector<LoadSample> loads;
  for (const auto& u : ctx.store.load_records("units.jsonl")) {
    finished.insert(unit_key(u));
    loads.push_back(load_from_json(u.at("load")));
  }
  if (const int64_t dropped = ctx.store.prune_samples([&](const json& j) {
        return finished.count(unit_key(j)) != 0;
      }); dropped > 0)
    log::info("resume: dropped ", dropped, " samples of an unfinished prompt");
  std::vector<json> samples = ctx.store.load_records("samples.jsonl");
  out.n_resumed = static_cast<int64_t>(finished.size());

  auto refresh = [&] {
    done.clear();
    const auto base_lines = lines_of(samples, base_key, "baseline");
    const LoadSample load = combine(loads);
    for (const auto& pc : ctx.plan.cells) {
      const auto cand_lines = lines_of(samples, pc.cell.key, "candidate");
      if (cand_lines.empty()) continue;
      CellMetrics m = cell_metrics(pc, cand_lines, base_lines, ctx.has_draft);
      m.load = load;
      if (pc.checked && pc.greedy && cfg.checks.greedy_equality && pc.baseline == "greedy")
        m.checks.push_back(greedy_equality(cand_lines, base_lines));
      done.push_back(std::move(m));
    }
    ctx.store.write_cells(done);
    write_outputs(ctx.store, ctx.info, done, {});
  };
  if (!samples.empty()) refresh();

  auto base = reg::create(ctx.plan.baseline, ctx.plan.baseline_params);
  std::vector<std::unique_ptr<reg::Strategy>> cands;
  for (const auto& pc : ctx.plan.cells) cands.push_back(reg::create(pc.cell.strategy, pc.resolved));
  const int64_t n_units = cfg.repeats * static_cast<int64_t>(cfg.prompts.size());
  const int64_t per_unit = (ctx.plan.n_generations - (1 + static_cast<int64_t>(cands.size())) * cfg.warmup) /
                           std::max<int64_t>(1, n_units);
  try {
    if (finished.size() < static_cast<size_t>(n_units)) {
      ctx.progress.start_cell(0, "warm-up");
      for (int64_t w = 0; w < cfg.warmup; ++w) {
        ctx.runner.warmup(*base);
        for (auto& c : cands) ctx.runner.warmup(*c);
      }
    }
    for (int64_t r = 0; r < cfg.repeats; ++r)
      for (size_t i = 0; i < cfg.prompts.size(); ++i) {
        const std::string& id = cfg.prompts[i].id;
        if (finished.count(unit_key(r, id))) {
          ctx.progress.skip_cell(per_unit);
          continue;
        }
        ctx.progress.start_cell(r * static_cast<int64_t>(cfg.prompts.size()) + static_cast<int64_t>(i),
                                "prompt " + id);
        std::vector<json> unit;
        LoadMonitor monitor;
        monitor.start();
        ctx.runner.converse(*base, base_key, "baseline", i, r, unit);
        for (size_t c = 0; c < cands.size(); ++c)
          ctx.runner.converse(*cands[c], ctx.plan.cells[c].cell.key, "candidate", i, r, unit);
        const LoadSample load = monitor.stop();
        ctx.store.commit_unit(unit, {{"repeat", r}, {"prompt", id}, {"load", to_json(load)}});
        finished.insert(unit_key(r, id));
        loads.push_back(load);
        samples.insert(samples.end(), unit.begin(), unit.end());
        refresh();
        ctx.progress.finish_cell("prompt " + id + " (" + cfg.prompts[i].category + ") done" +
                                 (load.contended() ? ", CONTENDED: " + load.describe() : ""));
      }
  } catch (const Interrupted&) {
    out.interrupted = true;
  }
}

}  // namespace

// The cells [opt.cells_begin, opt.cells_end) of the plan (a shard: --cells A:B).
Plan select_cells(Plan plan, const ExperimentConfig& cfg, const RunOptions& opt) {
  if (opt.cells_begin == 0 && opt.cells_end < 0) return plan;
  const auto n = static_cast<int64_t>(plan.cells.size());
  const int64_t end = opt.cells_end < 0 ? n : opt.cells_end;
  SD_CHECK(cfg.interleave == "cell", cfg.file, ": --cells selects cells of an interleave: cell experiment; this one is"
           " interleave: ", cfg.interleave, " (shard it by prompts: prompts.range)");
  SD_CHECK(opt.cells_begin >= 0 && opt.cells_begin < end && end <= n, cfg.file, ": --cells ", opt.cells_begin, ":",
           end, " is not a non-empty range of the experiment's ", n, " cells (0-based, end exclusive)");
  plan.cells = std::vector<PlannedCell>(plan.cells.begin() + opt.cells_begin, plan.cells.begin() + end);
  plan.n_generations = plan.max_target_forwards = 0;
  for (const auto& pc : plan.cells) {
    plan.n_generations += pc.n_generations;
    plan.max_target_forwards += pc.max_target_forwards;
  }
  return plan;
}

RunOutcome run_experiment(const ExperimentConfig& cfg, const RunOptions& opt) {
  const double loadavg_start = read_load_snapshot().loadavg_1m;
  const Plan plan = select_cells(make_plan(cfg), cfg, opt);
  RunOutcome out;
  out.run_dir = open_run_dir(cfg, opt);
  out.n_cells = static_cast<int64_t>(plan.cells.size());
  RunStore store(out.run_dir);
  std::vector<CellMetrics> done;
  if (cfg.interleave == "cell") {
    done = store.load_finished();
    std::set<std::string> finished;
    for (const auto& c : done) finished.insert(c.cell.key);
    if (const int64_t dropped = store.prune_samples(finished); dropped > 0)
      log::info("resume: dropped ", dropped, " samples of an unfinished cell");
    out.n_resumed = static_cast<int64_t>(done.size());
  }

  const Models models = load_models(cfg, opt.threads_oversubscribe);
  std::vector<EncodedPrompt> prompts;
  for (const auto& p : cfg.prompts) prompts.push_back({&p, encode_prompt(p, models.target)});
  json env = torch_env(collect_env(cfg.target.threads, source_root()));
  env["load"] = {{"loadavg_start", loadavg_start}};  // completed at the end of the run
  env["models"] = {{"target", model_env(models.target)}};
  if (models.draft) env["models"]["draft"] = model_env(*models.draft);
  env["memory"] = {{"after_load", memory_env()}};  // "at_end" is added at the end of the run
  if (opt.cells_begin != 0 || opt.cells_end >= 0)  // a shard: which cells it ran
    env["cells"] = std::to_string(opt.cells_begin) + ":" + std::to_string(opt.cells_begin + out.n_cells);
  env.update(opt.env_extra);
  RunInfo info{cfg.name,  cfg.description, fs::path(out.run_dir).filename().string(), cfg.target.name,
               cfg.draft ? cfg.draft->name : "", env, out.n_cells, read_context(cfg)};
  write_atomic(store.path("env.json"), env.dump(2) + "\n");

  const bool by_prompt = cfg.interleave == "prompt";
  const int64_t n_units = by_prompt ? cfg.repeats * static_cast<int64_t>(cfg.prompts.size()) : out.n_cells;
  Progress progress(n_units, plan.n_generations, opt.progress);
  CellRunner runner(cfg, models, prompts, progress);
  RunContext ctx{cfg, plan, store, info, progress, runner, models.draft.has_value()};
  if (by_prompt) {
    run_by_prompt(ctx, done, out);
  } else {
    run_by_cell(ctx, done, out);
  }
  if (!out.interrupted) write_traces(ctx);
  env["end_time"] = utc_now_iso();
  env["interrupted"] = out.interrupted;
  env["memory"]["at_end"] = memory_env();
  env["load"] = load_summary(loadavg_start, done);
  if (by_prompt) {
    int64_t n_contended = 0, n_units_done = 0;
    for (const auto& u : store.load_records("units.jsonl"))
      ++n_units_done, n_contended += load_from_json(u.at("load")).contended();
    env["load"]["n_prompts_done"] = n_units_done;
    env["load"]["n_prompts_contended"] = n_contended;
  }
  info.env = env;
  write_atomic(store.path("env.json"), env.dump(2) + "\n");
  const auto plots = cfg.plots && !done.empty() ? make_plots(out.run_dir) : std::vector<std::string>{};
  write_outputs(store, info, done, plots);
  if (by_prompt) {  // counted in prompts (units), not cells
    out.unit = "prompts";
    out.n_cells = n_units;
    out.n_finished = static_cast<int64_t>(store.load_records("units.jsonl").size());
  } else {
    out.n_finished = static_cast<int64_t>(done.size());
  }
  for (const auto& c : done) out.checks_passed = out.checks_passed && c.checks_passed();
  return out;
}

}  // namespace specdec::harness
