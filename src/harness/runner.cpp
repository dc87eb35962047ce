// The experiment runner: models -> cells -> interleaved measurements -> checks -> commit.
// The jobs it calls on: loading (run_models.h), measuring a cell and its checks (cell_runner.h),
// a cell's figures (metrics.h), the run folder's files (run_folder.h, results.h).
#include "harness/runner.h"

#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "harness/cell_runner.h"
#include "harness/checks.h"
#include "harness/load.h"
#include "harness/paths.h"
#include "harness/plan.h"
#include "harness/progress.h"
#include "harness/report.h"
#include "harness/results.h"
#include "harness/run_folder.h"
#include "harness/run_models.h"
#include "strategies/registry.h"

namespace specdec::harness {

namespace fs = std::filesystem;
namespace reg = specdec::strategies;
using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}
bool stop_requested() { return g_stop.load(); }
void clear_stop_request() { g_stop.store(false); }

namespace {

// Everything a run needs once its folder is open and its models are loaded.
struct RunContext {
  const ExperimentConfig& cfg;
  const Plan& plan;
  RunStore store;
  RunInfo info;
  Progress& progress;
  CellRunner& runner;
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
      CellMetrics m = cell_metrics(pc, cand_lines, base_lines);
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
        ctx.runner.converse(*base, ctx.plan.baseline_params, base_key, "baseline", i, r, unit);
        for (size_t c = 0; c < cands.size(); ++c)
          ctx.runner.converse(*cands[c], ctx.plan.cells[c].resolved, ctx.plan.cells[c].cell.key, "candidate", i, r,
                              unit);
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
  RunContext ctx{cfg, plan, store, info, progress, runner};
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
