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
             first_difference(settings, mine));
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
      done.insert(unit_key(u));
      units.push_back(u);
    }
    for (const auto& s : store.load_records("samples.jsonl"))
      if (done.count(unit_key(s)))
        samples.push_back(s);
  }
  const RunStore store(out);
  write_atomic(store.path("config.yaml"), to_yaml(merged));
  write_atomic(store.path("samples.jsonl"), jsonl_text(samples));
  write_atomic(store.path("units.jsonl"), jsonl_text(units));
  merged.file = store.path("config.yaml");
  return merged;
}

}  // namespace specdec::harness
