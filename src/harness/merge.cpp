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
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  ExperimentConfig cfg = parse_experiment(ss.str(), file.string());
  const char* records = cfg.interleave == "prompt" ? "units.jsonl" : "cells.jsonl";
  SD_CHECK(fs::exists(fs::path(shard) / records), "merge: '", shard, "' has no ", records, ": no ",
           cfg.interleave == "prompt" ? "prompt" : "cell", " of this interleave: ", cfg.interleave, " run finished");
  return cfg;
}

// The resolved config without its prompts: what every prompt shard must share.
std::string settings_of(ExperimentConfig cfg) {
  cfg.prompts.clear();
  return to_yaml(cfg);
}

// interleave: cell: every shard runs the same experiment (its own range of cells); the finished
// cells and their samples travel, each cell from exactly one shard.
void merge_cell_shards(const std::vector<std::string>& shards, const ExperimentConfig& first,
                       std::vector<json>& samples, std::vector<json>& cells) {
  const std::string settings = to_yaml(first);
  std::map<std::string, std::string> owner;  // cell key -> shard
  for (const auto& shard : shards) {
    const std::string mine = to_yaml(read_config(shard));
    SD_CHECK(mine == settings, "merge: '", shard, "' is not the experiment of '", shards[0], "': ",
             first_difference(settings, mine));
    const RunStore store(shard);
    std::set<std::string> done;
    for (const auto& c : store.load_records("cells.jsonl")) {
      const std::string key = c.at("key").get<std::string>();
      const auto [it, fresh] = owner.emplace(key, shard);
      SD_CHECK(fresh, "merge: cell '", key, "' is in both '", it->second, "' and '", shard,
               "' (shards must not overlap: --cells ranges)");
      done.insert(key);
      cells.push_back(c);
    }
    // A cell's samples without its cells.jsonl line never committed (see results.h).
    for (const auto& s : store.load_records("samples.jsonl"))
      if (done.count(s.at("cell").get<std::string>())) samples.push_back(s);
  }
}

}  // namespace

ExperimentConfig merge_shards(const std::vector<std::string>& shards, const std::string& out) {
  SD_CHECK(!shards.empty(), "merge: no shard folders given");
  SD_CHECK(!fs::exists(fs::path(out) / "config.yaml"), "merge: '", out, "' already holds a run; choose a new --out");
  ExperimentConfig merged = read_config(shards[0]);
  std::vector<json> samples, units, cells;
  if (merged.interleave == "cell") {
    merge_cell_shards(shards, merged, samples, cells);
  } else {
    merged.prompts.clear();
    const std::string settings = settings_of(merged);
    std::map<std::string, std::string> owner;  // prompt id -> shard
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
  }
  const RunStore store(out);
  write_atomic(store.path("config.yaml"), to_yaml(merged));
  write_atomic(store.path("samples.jsonl"), jsonl_text(samples));
  if (merged.interleave == "cell") {
    write_atomic(store.path("cells.jsonl"), jsonl_text(cells));
  } else {
    write_atomic(store.path("units.jsonl"), jsonl_text(units));
  }
  // Traced cells' pages (strategies[i].trace) travel with their shard.
  for (const auto& shard : shards) {
    const fs::path traces = fs::path(shard) / "traces";
    if (!fs::is_directory(traces)) continue;
    fs::create_directories(store.path("traces"));
    for (const auto& f : fs::directory_iterator(traces))
      fs::copy_file(f.path(), fs::path(store.path("traces")) / f.path().filename(), fs::copy_options::skip_existing);
  }
  merged.file = store.path("config.yaml");
  return merged;
}

json describe_shards(const std::vector<std::string>& shards) {
  json out = json::array();
  for (const auto& shard : shards) {
    const RunStore store(shard);
    json env = json::object();
    if (std::ifstream in(store.path("env.json")); in) env = json::parse(in, nullptr, false);
    if (env.is_discarded()) env = json::object();
    json entry = {{"dir", shard}, {"node", env.value("hostname", "unknown")}, {"env", env}};
    if (fs::exists(store.path("units.jsonl"))) {
      json prompts = json::array();
      for (const auto& u : store.load_records("units.jsonl")) prompts.push_back(unit_key(u));
      entry["prompts"] = prompts;
    } else {
      json cells = json::array();
      for (const auto& c : store.load_records("cells.jsonl")) cells.push_back(c.at("key"));
      entry["cells"] = cells;
    }
    out.push_back(entry);
  }
  return out;
}

}  // namespace specdec::harness
