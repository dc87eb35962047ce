#pragma once
// Sweep expansion: strategies x Cartesian grid -> cells. A cell is one strategy with one
// full parameter assignment; its key is stable across runs (label + sorted params), which
// is what --resume matches on.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/experiment.h"

namespace specdec::harness {

struct Cell {
  std::string key;                            // "label|k1=v1,k2=v2" (params sorted by name)
  size_t entry = 0;                           // its entry: ExperimentConfig::strategies[entry]
  std::string label;                          // StrategyEntry::label
  std::string strategy;                       // registry name
  std::map<std::string, std::string> params;  // pinned params + this sweep point's values
  std::map<std::string, std::string> point;   // only the swept values applied to this cell
  bool trace = false;                         // StrategyEntry::trace
};

// Does the strategy of ExperimentConfig::strategies[entry] accept parameter `key` (its own
// schema or a processor param)?
using AcceptsParam = std::function<bool(size_t entry, const std::string& key)>;

// For each strategy entry, each grid point contributes the swept keys the strategy accepts
// and has not pinned in its params. Points that give a strategy identical params collapse
// into one cell (e.g. greedy under a gamma sweep runs once). Order: strategies in file
// order, grid points with the first axis varying slowest.
std::vector<Cell> expand_cells(const ExperimentConfig& cfg, const AcceptsParam& accepts);

std::string cell_key(const std::string& label, const std::map<std::string, std::string>& params);

}  // namespace specdec::harness
