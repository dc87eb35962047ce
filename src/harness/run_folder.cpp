// The run folder's outputs and env.json parts (run_folder.h).
#include "harness/run_folder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "harness/load.h"
#include "harness/paths.h"
#include "model/causal_lm.h"
#include "model/panels.h"

namespace specdec::harness {

namespace fs = std::filesystem;
using nlohmann::json;

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
  // The CPU kernels the packed engine picked (model/panels.h): speed figures depend on them.
  env["kernels"] = {{"fp32", model::panels_kernel()}, {"int8", model::panels_int8_kernel()}};
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

}  // namespace specdec::harness
