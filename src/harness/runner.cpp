// The experiment runner: models -> cells -> interleaved measurements -> checks -> commit.
#include "harness/runner.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <array>
#include <atomic>
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
#include "harness/plan.h"
#include "harness/progress.h"
#include "harness/report.h"
#include "harness/results.h"
#include "harness/stats.h"
#include "model/causal_lm.h"
#include "strategies/registry.h"
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
  return model::load(spec);
}

Models load_models(const ExperimentConfig& cfg, bool oversubscribe) {
  model::set_threads(cfg.target.threads, oversubscribe);
  Models m;
  m.target = load_one(cfg.target, oversubscribe);
  if (cfg.draft) {
    const auto& d = *cfg.draft;
    // Self-drafting: the same weights serve both roles; each strategy run has its own caches.
    const bool same = d.name == cfg.target.name && d.dtype == cfg.target.dtype && d.seed == cfg.target.seed;
    m.draft = same ? m.target : load_one(d, oversubscribe);
  }
  return m;
}

struct EncodedPrompt {
  std::string id, category;
  Tokens tokens;
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
  int64_t n_decode_tokens = 0;
  PhaseBreakdown phases;
  std::vector<int64_t> accepted_pos, drafted_pos;
  std::vector<double> ttft;

  void add(const reg::Result& r, double ttft_ms, double wall_ms) {
    const auto& s = r.stats;
    n_generated += s.n_generated;
    n_drafted += s.n_drafted;
    n_accepted += s.n_accepted;
    n_rounds += s.n_rounds;
    n_tree_rounds += s.n_tree_rounds;
    n_target_forwards += s.n_target_forwards;
    n_draft_forwards += s.n_draft_forwards;
    phases.ms += s.phase_ms;
    phases.wall_ms += wall_ms;
    // A round is a verification round, or for autoregressive decoding one decode step.
    phases.n_rounds += s.n_rounds > 0 ? s.n_rounds : std::max<int64_t>(0, s.n_target_forwards - 1);
    ++phases.n_generations;
    // The prefill forward yields the first token; each later token costs decode time. (Not
    // wall - TTFT: beam search emits everything at the end, so its TTFT is its wall time.)
    if (s.n_generated >= 2) {
      ms_decode += wall_ms - s.phase_ms.prefill;
      n_decode_tokens += s.n_generated - 1;
    }
    ttft.push_back(ttft_ms);
    if (accepted_pos.size() < s.accepted_per_position.size()) accepted_pos.resize(s.accepted_per_position.size());
    if (drafted_pos.size() < s.drafted_per_position.size()) drafted_pos.resize(s.drafted_per_position.size());
    for (size_t i = 0; i < s.accepted_per_position.size(); ++i) accepted_pos[i] += s.accepted_per_position[i];
    for (size_t i = 0; i < s.drafted_per_position.size(); ++i) drafted_pos[i] += s.drafted_per_position[i];
  }
};

Spread spread_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {stats::median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
          stats::quantile(v, 0.25), stats::quantile(v, 0.75)};
}

class CellRunner {
 public:
  CellRunner(const ExperimentConfig& cfg, const Models& models, const std::vector<EncodedPrompt>& prompts,
             Progress& progress)
      : cfg_(cfg), models_(models), prompts_(prompts), progress_(progress) {}

  CellMetrics run(const PlannedCell& pc, std::vector<json>& samples);

 private:
  struct Timed {
    reg::Result result;
    double wall_ms = 0, ttft_ms = 0;
  };
  reg::Request request(const Tokens& prompt, uint64_t seed, int64_t max_new) const;
  Timed generate(reg::Strategy& s, const reg::Request& req, const std::string& what);
  json sample_line(const PlannedCell& pc, const std::string& role, const EncodedPrompt& p, int64_t repeat,
                   uint64_t seed, const Timed& t) const;
  void measure(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples,
               std::vector<Tokens>& base_out, std::vector<Tokens>& cand_out);
  void sampling_checks(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples);
  std::vector<double> first_token_probs(const Tokens& prompt, const sampling::ProcessorConfig& proc) const;
  double loglik(const Tokens& prompt, const Tokens& gen, int64_t length) const;

  const ExperimentConfig& cfg_;
  const Models& models_;
  const std::vector<EncodedPrompt>& prompts_;
  Progress& progress_;
};

reg::Request CellRunner::request(const Tokens& prompt, uint64_t seed, int64_t max_new) const {
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

json CellRunner::sample_line(const PlannedCell& pc, const std::string& role, const EncodedPrompt& p, int64_t repeat,
                             uint64_t seed, const Timed& t) const {
  const auto& s = t.result.stats;
  json j = {{"cell", pc.cell.key}, {"role", role}, {"prompt", p.id}, {"category", p.category},
            {"repeat", repeat}, {"seed", seed}, {"n_prompt", s.n_prompt}, {"n_generated", s.n_generated},
            {"finish", reg::to_string(t.result.finish)}, {"wall_ms", t.wall_ms}, {"ttft_ms", t.ttft_ms},
            {"tokens", t.result.tokens}};
  if (role == "baseline" || role == "candidate") {
    j["text"] = t.result.text.empty() ? decode_text(t.result.tokens, models_.target) : t.result.text;
    j["n_target_forwards"] = s.n_target_forwards;
    j["n_drafted"] = s.n_drafted;
    j["n_accepted"] = s.n_accepted;
    if (!s.drafter_stats.empty()) j["drafter_stats"] = s.drafter_stats;
  }
  return j;
}

uint64_t measure_seed(uint64_t base, int64_t repeat, size_t prompt) {
  return base + 1000 * static_cast<uint64_t>(repeat) + prompt;
}

void CellRunner::measure(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples,
                         std::vector<Tokens>& base_out, std::vector<Tokens>& cand_out) {
  auto cand = reg::create(pc.cell.strategy, pc.resolved);
  std::unique_ptr<reg::Strategy> base;
  if (!pc.baseline.empty()) base = reg::create(pc.baseline, pc.baseline_params);
  const int64_t n_max = cfg_.max_new_tokens;
  for (int64_t w = 0; w < cfg_.warmup; ++w) {  // warm caches and allocators; not recorded
    const auto& p = prompts_[0];
    if (base) generate(*base, request(p.tokens, cfg_.seed, n_max), "warmup");
    generate(*cand, request(p.tokens, cfg_.seed, n_max), "warmup");
  }
  Totals cand_tot, base_tot;
  std::vector<double> cand_tps, base_tps, speedups;
  std::map<std::string, std::vector<double>> cat_tps, cat_speedup;
  for (int64_t r = 0; r < cfg_.repeats; ++r) {
    double c_tok = 0, c_ms = 0, b_tok = 0, b_ms = 0;
    std::map<std::string, std::array<double, 4>> cat;  // c_tok, c_ms, b_tok, b_ms
    for (size_t i = 0; i < prompts_.size(); ++i) {
      const auto& p = prompts_[i];
      const uint64_t seed = measure_seed(cfg_.seed, r, i);
      const std::string what = "prompt " + std::to_string(i + 1) + "/" + std::to_string(prompts_.size()) +
                               " repeat " + std::to_string(r + 1) + "/" + std::to_string(cfg_.repeats);
      // One generation of one side, added to that side's totals; `col` is its first column
      // in `cat` (candidate 0, baseline 2).
      auto run_side = [&](reg::Strategy& strategy, const char* role, Totals& tot, double& tok, double& ms,
                          size_t col, std::vector<Tokens>& out) {
        const Timed t = generate(strategy, request(p.tokens, seed, n_max), what);
        tot.add(t.result, t.ttft_ms, t.wall_ms);
        tok += t.result.stats.n_generated, ms += t.wall_ms;
        cat[p.category][col] += t.result.stats.n_generated, cat[p.category][col + 1] += t.wall_ms;
        samples.push_back(sample_line(pc, role, p, r, seed, t));
        if (r == 0) out.push_back(t.result.tokens);
      };
      // Interleaved: the baseline runs right before the candidate on the same prompt and seed.
      if (base) run_side(*base, "baseline", base_tot, b_tok, b_ms, 2, base_out);
      run_side(*cand, "candidate", cand_tot, c_tok, c_ms, 0, cand_out);
    }
    cand_tps.push_back(1000.0 * c_tok / std::max(c_ms, 1e-9));
    if (base) {
      base_tps.push_back(1000.0 * b_tok / std::max(b_ms, 1e-9));
      speedups.push_back(cand_tps.back() / std::max(base_tps.back(), 1e-12));
    }
    for (const auto& [name, v] : cat) {
      const double tps = 1000.0 * v[0] / std::max(v[1], 1e-9);
      cat_tps[name].push_back(tps);
      if (base) cat_speedup[name].push_back(tps / std::max(1000.0 * v[2] / std::max(v[3], 1e-9), 1e-12));
    }
  }
  m.n_prompts = static_cast<int64_t>(prompts_.size());
  m.n_repeats = cfg_.repeats;
  m.n_generated = cand_tot.n_generated;
  m.tok_s = spread_of(cand_tps);
  m.baseline_tok_s = base ? spread_of(base_tps) : m.tok_s;
  m.speedup = base ? spread_of(speedups) : Spread{1, 1, 1, 1, 1};
  m.ms_per_token = cand_tot.n_decode_tokens ? cand_tot.ms_decode / cand_tot.n_decode_tokens : 0;
  m.ttft_ms = stats::median(cand_tot.ttft);
  m.phases = cand_tot.phases;
  if (base) m.baseline_phases = base_tot.phases;
  for (const auto& p : prompts_) ++m.categories[p.category].n_prompts;
  for (auto& [name, c] : m.categories) {
    c.tok_s = stats::median(cat_tps[name]);
    c.speedup = base ? stats::median(cat_speedup[name]) : 1.0;
  }
  // Speculative statistics and the Leviathan et al. prediction.
  m.n_drafted = cand_tot.n_drafted;
  m.n_accepted = cand_tot.n_accepted;
  m.n_rounds = cand_tot.n_rounds;
  m.n_target_forwards = cand_tot.n_target_forwards;
  m.alpha = m.n_drafted ? double(m.n_accepted) / double(m.n_drafted) : 0;
  const int64_t n_prefills = m.n_prompts * m.n_repeats;
  m.tau = cand_tot.n_target_forwards > n_prefills
              ? double(cand_tot.n_generated) / double(cand_tot.n_target_forwards - n_prefills)
              : 0;
  for (size_t i = 0; i < cand_tot.drafted_pos.size(); ++i)
    m.acceptance_per_position.push_back(
        cand_tot.drafted_pos[i] ? double(cand_tot.accepted_pos[i]) / double(cand_tot.drafted_pos[i]) : 0);
  while (!m.acceptance_per_position.empty() && cand_tot.drafted_pos[m.acceptance_per_position.size() - 1] == 0)
    m.acceptance_per_position.pop_back();
  const Totals& ar = base ? base_tot : cand_tot;  // autoregressive decode time per token
  m.target_step_ms = ar.n_decode_tokens ? ar.ms_decode / ar.n_decode_tokens : 0;
  const int64_t draft_steps = cand_tot.n_draft_forwards ? cand_tot.n_draft_forwards : cand_tot.n_drafted;
  m.draft_step_ms = draft_steps ? cand_tot.phases.ms.draft / draft_steps : 0;
  m.cost_ratio = m.target_step_ms > 0 ? m.draft_step_ms / m.target_step_ms : 0;
  m.gamma = reg::strategy_needs(pc.cell.strategy, pc.resolved, models_.draft.has_value()).draft_length;
  // Leviathan et al.'s prediction models chains; for token trees alpha is per node and the
  // formula does not apply, so no prediction is made.
  if (m.gamma > 0 && m.n_drafted > 0 && cand_tot.n_tree_rounds == 0) {
    m.predicted_speedup = stats::leviathan_speedup(m.alpha, m.gamma, m.cost_ratio);
    m.measured_over_predicted = m.predicted_speedup > 0 ? m.speedup.median / m.predicted_speedup : 0;
  }
}

std::vector<double> CellRunner::first_token_probs(const Tokens& prompt, const sampling::ProcessorConfig& proc) const {
  auto& target = *models_.target.model;
  model::KVCache cache = target.make_cache(1, static_cast<int64_t>(prompt.size()) + 1);
  const at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong).view({1, -1});
  const at::Tensor logits = target.forward(ids, {0}, cache);  // [1, T, V]
  const at::Tensor last = logits[0].narrow(0, logits.size(1) - 1, 1).contiguous();  // [1, V]
  const at::Tensor p = sampling::probabilities(last, proc, prompt).to(at::kDouble).contiguous();  // [1, V]
  const double* d = p.data_ptr<double>();
  return std::vector<double>(d, d + p.numel());
}

// Raw (unprocessed) target log-likelihood of the first `length` generated tokens.
double CellRunner::loglik(const Tokens& prompt, const Tokens& gen, int64_t length) const {
  const int64_t n = std::min<int64_t>(length, static_cast<int64_t>(gen.size()));
  if (n == 0) return 0;
  auto& target = *models_.target.model;
  std::vector<int64_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), gen.begin(), gen.begin() + n);
  model::KVCache cache = target.make_cache(1, static_cast<int64_t>(all.size()));
  const at::Tensor ids = at::tensor(all, at::kLong).view({1, -1});
  const at::Tensor logits = target.forward(ids, {0}, cache)[0];  // [T, V]
  const int64_t np = static_cast<int64_t>(prompt.size());
  const at::Tensor lp = at::log_softmax(logits.narrow(0, np - 1, n).to(at::kDouble), -1);  // [n, V]
  const at::Tensor tgt = at::tensor(std::vector<int64_t>(gen.begin(), gen.begin() + n), at::kLong).view({-1, 1});
  return lp.gather(1, tgt).sum().item<double>();
}

void CellRunner::sampling_checks(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples) {
  const auto& k = cfg_.checks;
  if (!k.first_token && !k.sequence) return;
  const auto& p = prompts_[0];
  const int64_t len = std::max<int64_t>(2, k.sequence_length);  // >= 2 so the first token is drafted
  auto cand = reg::create(pc.cell.strategy, pc.resolved);
  auto base = reg::create("sampling", pc.baseline_params);
  const int64_t n_cand = std::max(k.first_token ? k.first_token_samples : 0, k.sequence ? k.sequence_samples : 0);
  std::vector<Tokens> cand_seqs, base_seqs;
  std::vector<TokenId> first;
  for (int64_t j = 0; j < n_cand; ++j) {
    const uint64_t seed = cfg_.seed + 1000003 + static_cast<uint64_t>(j);
    const Timed t = generate(*cand, request(p.tokens, seed, len),
                             "check sample " + std::to_string(j + 1) + "/" + std::to_string(n_cand));
    SD_CHECK(!t.result.tokens.empty(), "check run of ", pc.cell.key, " generated no token");
    first.push_back(t.result.tokens[0]);
    cand_seqs.push_back(t.result.tokens);
    samples.push_back(sample_line(pc, "check_candidate", p, 0, seed, t));
  }
  if (k.first_token) {
    const auto probs = first_token_probs(p.tokens, reg::processor_config(pc.resolved));
    std::vector<TokenId> ft(first.begin(), first.begin() + k.first_token_samples);
    auto out = first_token_check(probs, ft, k.first_token_top_k, k.significance);
    out.detail = "prompt " + p.id + "; " + out.detail;
    m.checks.push_back(out);
  }
  if (!k.sequence) return;
  std::vector<double> ll_cand, ll_base;
  for (int64_t j = 0; j < k.sequence_samples; ++j) {
    const uint64_t seed = cfg_.seed + 2000003 + static_cast<uint64_t>(j);  // independent of the candidate's
    const Timed t = generate(*base, request(p.tokens, seed, len),
                             "check baseline " + std::to_string(j + 1) + "/" + std::to_string(k.sequence_samples));
    base_seqs.push_back(t.result.tokens);
    samples.push_back(sample_line(pc, "check_baseline", p, 0, seed, t));
    check_interrupt();
    ll_base.push_back(loglik(p.tokens, base_seqs.back(), len));
    ll_cand.push_back(loglik(p.tokens, cand_seqs[static_cast<size_t>(j)], len));
  }
  cand_seqs.resize(static_cast<size_t>(k.sequence_samples));
  auto out = sequence_check(base_seqs, cand_seqs, ll_base, ll_cand, len, k.significance);
  out.detail = "prompt " + p.id + "; " + out.detail;
  m.checks.push_back(out);
}

bool has_bool_param(const std::string& strategy, const std::string& key) {
  for (const auto& s : reg::find(strategy).params)
    if (s.name == key && s.type == "bool") return true;
  return false;
}

CellMetrics CellRunner::run(const PlannedCell& pc_in, std::vector<json>& samples) {
  PlannedCell pc = pc_in;
  if (cfg_.checks.inject_residual_bug && pc.checked) {
    // Testing only: the checked strategy's verifier emits a wrong correction token
    // (kernels::VerifyArgs::planted_residual_bug); a working check must flag it.
    SD_CHECK(has_bool_param(pc.cell.strategy, "inject_residual_bug"), "checks.inject_residual_bug: strategy '",
             pc.cell.strategy, "' has no inject_residual_bug parameter to plant the bug with");
    pc.resolved.set("inject_residual_bug", "true");
  }
  Stopwatch clock;
  CellMetrics m;
  m.cell = pc.cell;
  m.baseline = pc.baseline;
  std::vector<Tokens> base_out, cand_out;
  LoadMonitor load;  // the speed figures come from measure(): judge the machine's load there
  load.start();
  measure(pc, m, samples, base_out, cand_out);
  m.load = load.stop();
  if (pc.checked && pc.greedy && cfg_.checks.greedy_equality && pc.baseline == "greedy") {
    std::vector<std::string> ids;
    for (const auto& p : prompts_) ids.push_back(p.id);
    m.checks.push_back(greedy_equality_check(ids, base_out, cand_out));
  } else if (pc.checked && !pc.greedy) {
    sampling_checks(pc, m, samples);
  }
  m.wall_s = clock.seconds();
  return m;
}

// ---- run folder ------------------------------------------------------------------------

std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool ga = static_cast<bool>(std::getline(sa, la)), gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga || !gb || la != lb)
      return "line " + std::to_string(line) + ": run has '" + (ga ? la : "<end>") + "', now '" + (gb ? lb : "<end>") + "'";
  }
}

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
  for (const char* name : {"speedup_vs_gamma.png", "acceptance_by_position.png", "tok_s_per_strategy.png"})
    if (fs::exists(fs::path(run_dir) / name)) pngs.push_back(name);
  return pngs;
}

void write_outputs(const RunStore& store, const RunInfo& info, const std::vector<CellMetrics>& cells,
                   const std::vector<std::string>& plots) {
  write_atomic(store.path("metrics.json"), metrics_json(info, cells).dump(2) + "\n");
  write_atomic(store.path("summary.csv"), summary_csv(cells));
  write_atomic(store.path("report.md"), report_markdown(info, cells, plots));
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

}  // namespace

RunOutcome run_experiment(const ExperimentConfig& cfg, const RunOptions& opt) {
  const double loadavg_start = read_load_snapshot().loadavg_1m;
  const Plan plan = make_plan(cfg);
  RunOutcome out;
  out.run_dir = open_run_dir(cfg, opt);
  out.n_cells = static_cast<int64_t>(plan.cells.size());
  RunStore store(out.run_dir);
  std::vector<CellMetrics> done = store.load_finished();
  std::set<std::string> finished;
  for (const auto& c : done) finished.insert(c.cell.key);
  if (const int64_t dropped = store.prune_samples(finished); dropped > 0)
    log::info("resume: dropped ", dropped, " samples of an unfinished cell");
  out.n_resumed = static_cast<int64_t>(done.size());

  const Models models = load_models(cfg, opt.threads_oversubscribe);
  std::vector<EncodedPrompt> prompts;
  for (const auto& p : cfg.prompts) prompts.push_back({p.id, p.category, encode_prompt(p, models.target)});
  json env = torch_env(collect_env(cfg.target.threads, source_root()));
  env["load"] = {{"loadavg_start", loadavg_start}};  // completed at the end of the run
  RunInfo info{cfg.name, cfg.description, fs::path(out.run_dir).filename().string(), cfg.target.name,
               cfg.draft ? cfg.draft->name : "", env, out.n_cells};
  write_atomic(store.path("env.json"), env.dump(2) + "\n");

  Progress progress(out.n_cells, plan.n_generations, opt.progress);
  CellRunner runner(cfg, models, prompts, progress);
  for (size_t i = 0; i < plan.cells.size(); ++i) {
    const auto& pc = plan.cells[i];
    if (finished.count(pc.cell.key)) {
      progress.skip_cell(pc.n_generations);
      continue;
    }
    progress.start_cell(static_cast<int64_t>(i), pc.cell.label + " " + format_params(pc.cell.point));
    std::vector<json> samples;
    CellMetrics m;
    try {
      m = runner.run(pc, samples);
    } catch (const Interrupted&) {
      out.interrupted = true;
      break;
    }
    store.commit_cell(samples, m);  // durable before anything else refers to it
    done.push_back(m);
    write_outputs(store, info, done, {});
    char line[384];
    const std::string load_note = m.load.contended() ? ", CONTENDED: " + m.load.describe() : "";
    std::snprintf(line, sizeof line, "%s %s: %.2f tok/s, speedup %.3f, alpha %.3f%s%s", pc.cell.label.c_str(),
                  format_params(pc.cell.point).c_str(), m.tok_s.median, m.speedup.median, m.alpha,
                  m.checks.empty() ? "" : (m.checks_passed() ? ", checks pass" : ", CHECKS FAIL"), load_note.c_str());
    progress.finish_cell(line);
  }
  env["end_time"] = utc_now_iso();
  env["interrupted"] = out.interrupted;
  env["load"] = load_summary(loadavg_start, done);
  info.env = env;
  write_atomic(store.path("env.json"), env.dump(2) + "\n");
  const auto plots = cfg.plots && !done.empty() ? make_plots(out.run_dir) : std::vector<std::string>{};
  write_outputs(store, info, done, plots);
  out.n_finished = static_cast<int64_t>(done.size());
  for (const auto& c : done) out.checks_passed = out.checks_passed && c.checks_passed();
  return out;
}

}  // namespace specdec::harness
