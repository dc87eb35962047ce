#include "harness/merge.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/results.h"

namespace specdec::harness {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

ExperimentConfig read_config(const std::string& shard) {
  const fs::path file = fs::path(shard) / "config.yaml";
  SD_CHECK(fs::exists(file), "merge: '", shard, "' has no config.yaml (not a run folder)");
  SD_CHECK(fs::exists(fs::path(shard) / "units.jsonl"), "merge: '", shard,
           "' has no units.jsonl: not an interleave: prompt run, or no prompt finished");
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  ExperimentConfig cfg = parse_experiment(ss.str(), file.string());
  SD_CHECK(cfg.interleave == "prompt", "merge: '", shard, "' is an interleave: ", cfg.interleave,
           " run; only interleave: prompt runs (Spec-Bench's layout) merge");
  return cfg;
}

// The resolved config without its prompts: what every shard must share.
std::string settings_of(ExperimentConfig cfg) {
  cfg.prompts.clear();
  return to_yaml(cfg);
}

std::string first_different_line(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(sa, la)), gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga || !gb || la != lb) return "'" + (ga ? la : "<end>") + "' vs '" + (gb ? lb : "<end>") + "'";
  }
}

}  // namespace

ExperimentConfig merge_shards(const std::vector<std::string>& shards, const std::string& out) {
  SD_CHECK(!shards.empty(), "merge: no shard folders given");
  SD_CHECK(!fs::exists(fs::path(out) / "config.yaml"), "merge: '", out, "' already holds a run; choose a new --out");
  ExperimentConfig merged = read_config(shards[0]);
  merged.prompts.clear();
  const std::string settings = settings_of(merged);
  std::map<std::string, std::string> owner;  // prompt id -> shard
  std::vector<json> samples, units;
  for (const auto& shard : shards) {
    const ExperimentConfig cfg = read_config(shard);
    const std::string mine = settings_of(cfg);
    SD_CHECK(mine == settings, "merge: '", shard, "' differs from '", shards[0], "' beyond its prompts: ",
             first_different_line(settings, mine));
    for (const auto& p : cfg.prompts) {
      const auto [it, fresh] = owner.emplace(p.id, shard);
      SD_CHECK(fresh, "merge: prompt '", p.id, "' is in both '", it->second, "' and '", shard,
               "' (shards must not overlap)");
      merged.prompts.push_back(p);
    }
    // Only finished prompts travel: a prompt's samples without its units.jsonl line never committed.
    const RunStore store(shard);
    std::set<std::string> done;
    for (const auto& u : store.load_records("units.jsonl")) {
      done.insert(std::to_string(u.at("repeat").get<int64_t>()) + "/" + u.at("prompt").get<std::string>());
      units.push_back(u);
    }
    for (const auto& s : store.load_records("samples.jsonl"))
      if (done.count(std::to_string(s.at("repeat").get<int64_t>()) + "/" + s.at("prompt").get<std::string>()))
        samples.push_back(s);
  }
  const RunStore store(out);
  write_atomic(store.path("config.yaml"), to_yaml(merged));
  std::string text;
  for (const auto& s : samples) text += s.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  write_atomic(store.path("samples.jsonl"), text);
  text.clear();
  for (const auto& u : units) text += u.dump() + "\n";
  write_atomic(store.path("units.jsonl"), text);
  merged.file = store.path("config.yaml");
  return merged;
}

}  // namespace specdec::harness
