#pragma once
// What the runner (runner.h) writes to its run folder besides the committed cells and samples
// (results.h: RunStore): the folder opened or resumed with its config.yaml, env.json's parts,
// the outputs rewritten after every cell (metrics.json, summary.csv, report.md) and the plots.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/experiment.h"
#include "harness/metrics.h"
#include "harness/report.h"
#include "harness/results.h"
#include "harness/runner.h"

namespace specdec::model {
struct LoadedModel;
}

namespace specdec::harness {

// A new run folder with the resolved config.yaml, or with --resume the earlier one (whose
// config.yaml must match the experiment's).
std::string open_run_dir(const ExperimentConfig& cfg, const RunOptions& opt);

// scripts/plot_results.py on the run folder; the names of the figures it wrote (a failure is
// a warning: the results are complete without them).
std::vector<std::string> make_plots(const std::string& run_dir);

// metrics.json, summary.csv and report.md of the cells so far.
void write_outputs(const RunStore& store, const RunInfo& info, const std::vector<CellMetrics>& cells,
                   const std::vector<std::string>& plots);

// report.context: the markdown appended to report.md (published figures for context).
std::string read_context(const ExperimentConfig& cfg);

// env.json's parts: `env` with LibTorch's version, the BLAS and the threads in use added; what a
// model holds in memory and reads per decoded token ("models"); this process's memory
// ("memory"); the run-level load (below).
nlohmann::json torch_env(nlohmann::json env);
nlohmann::json model_env(const model::LoadedModel& m);
nlohmann::json memory_env();

// Run-level load: the 1-minute load average around the run and how many finished cells
// (resumed ones included) were measured on a contended machine.
nlohmann::json load_summary(double loadavg_start, const std::vector<CellMetrics>& cells);

}  // namespace specdec::harness
