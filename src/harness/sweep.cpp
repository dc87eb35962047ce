#include "harness/sweep.h"

#include <set>

namespace specdec::harness {

std::string cell_key(const std::string& label, const std::map<std::string, std::string>& params) {
  std::string key = label + "|";
  bool first = true;
  for (const auto& [k, v] : params) {
    key += (first ? "" : ",") + k + "=" + v;
    first = false;
  }
  return key;
}

namespace {
// All grid points as maps key -> value; one empty point when there is no sweep.
std::vector<std::map<std::string, std::string>> grid_points(const std::vector<SweepAxis>& axes) {
  std::vector<std::map<std::string, std::string>> points(1);
  for (const auto& axis : axes) {
    std::vector<std::map<std::string, std::string>> next;
    for (const auto& p : points)
      for (const auto& v : axis.values) {
        auto q = p;
        q[axis.key] = v;
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}
}  // namespace

std::vector<Cell> expand_cells(const ExperimentConfig& cfg, const AcceptsParam& accepts) {
  const auto points = grid_points(cfg.sweep);
  std::vector<Cell> cells;
  for (size_t i = 0; i < cfg.strategies.size(); ++i) {
    const auto& s = cfg.strategies[i];
    std::set<std::string> seen;
    for (const auto& point : points) {
      Cell c;
      c.entry = i;
      c.label = s.label;
      c.strategy = s.name;
      c.params = s.params;
      c.trace = s.trace;
      for (const auto& [k, v] : point) {
        if (s.params.count(k) || !accepts(i, k)) continue;  // pinned params win
        c.params[k] = v;
        c.point[k] = v;
      }
      c.key = cell_key(c.label, c.params);
      if (seen.insert(c.key).second) cells.push_back(std::move(c));
    }
  }
  return cells;
}

}  // namespace specdec::harness
