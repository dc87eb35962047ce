#pragma once
// Result files derived from the finished cells: metrics.json, summary.csv, report.md, and
// the side-by-side comparison of two runs. All are regenerated after every finished cell,
// so an interrupted run still has a report of what it finished.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/metrics.h"

namespace specdec::harness {

struct RunInfo {
  std::string experiment;
  std::string description;
  std::string run_id;
  std::string target, draft;   // model names
  nlohmann::json env;          // env.json contents
  int64_t n_cells_planned = 0;
  std::string context_markdown;  // report.context's text, appended to report.md (empty: none)
};

nlohmann::json metrics_json(const RunInfo& info, const std::vector<CellMetrics>& cells);
std::string summary_csv(const std::vector<CellMetrics>& cells);
std::string report_markdown(const RunInfo& info, const std::vector<CellMetrics>& cells,
                            const std::vector<std::string>& plots);

// Reads <run>/cells.jsonl of two runs and prints one row per cell key present in either.
std::string compare_runs(const std::string& run_a, const std::string& run_b);

// "k1=v1 k2=v2" for a params map (empty map: "-").
std::string format_params(const std::map<std::string, std::string>& params);

}  // namespace specdec::harness
