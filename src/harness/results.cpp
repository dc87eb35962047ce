#include "harness/results.h"

#include <unistd.h>  // gethostname

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "harness/experiment.h"
#include "io/json_limits.h"

namespace specdec::harness {

namespace fs = std::filesystem;
using nlohmann::json;

RunStore::RunStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  SD_CHECK(!ec, "cannot create results folder '", dir_, "': ", ec.message());
}

std::string RunStore::path(const std::string& file) const { return (fs::path(dir_) / file).string(); }

namespace {
// Whether the file ends in a torn record: a last line without its newline, which a kill during
// its append left (a record and its newline are one write, so a committed one always has it).
bool ends_torn(std::ifstream& in) {
  in.clear();
  in.seekg(0, std::ios::end);
  if (in.tellg() <= 0) return false;
  in.seekg(-1, std::ios::end);
  return in.get() != '\n';
}

// Appends records to a .jsonl file of the run after cutting a torn last line, which the first
// of them would otherwise continue: a resumed run's next commit would make one malformed line
// of the torn record and its own.
void append_records(const std::string& file, const std::string& text) {
  std::ifstream in(file, std::ios::binary);
  if (in && ends_torn(in)) {
    in.seekg(0);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t keep = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
    in.close();
    std::error_code ec;
    fs::resize_file(file, keep, ec);
    SD_CHECK(!ec, "cannot cut the torn last line of '", file, "': ", ec.message());
  }
  append_durable(file, text);
}
}  // namespace

std::vector<json> RunStore::load_records(const std::string& file) const {
  std::vector<json> out;
  std::ifstream in(path(file), std::ios::binary);
  if (!in) return out;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (!lines.empty() && ends_torn(in)) lines.pop_back();  // never committed, even if it parses
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    try {
      io::check_json_depth(lines[i], path(file) + ":" + std::to_string(i + 1));
      out.push_back(json::parse(lines[i]));
    } catch (const json::exception& e) {
      if (i + 1 == lines.size()) break;  // torn final line: that record never committed
      fail(path(file), ":", i + 1, ": malformed record: ", e.what());
    }
  }
  return out;
}

std::vector<CellMetrics> RunStore::load_finished() const {
  std::vector<CellMetrics> out;
  for (const auto& j : load_records("cells.jsonl")) out.push_back(cell_from_json(j));
  return out;
}

int64_t RunStore::prune_samples(const std::function<bool(const json&)>& keep_line) const {
  std::ifstream in(path("samples.jsonl"));
  if (!in) return 0;
  std::string kept;
  int64_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    bool keep = false;
    try {
      io::check_json_depth(line, path("samples.jsonl"));
      keep = keep_line(json::parse(line));
    } catch (const json::exception&) {
      keep = false;  // a torn line from an interrupted write
    }
    if (keep) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  in.close();
  if (dropped > 0) write_atomic(path("samples.jsonl"), kept);
  return dropped;
}

int64_t RunStore::prune_samples(const std::set<std::string>& finished) const {
  return prune_samples([&](const json& j) { return finished.count(j.at("cell").get<std::string>()) != 0; });
}

std::string jsonl_text(const std::vector<json>& records) {
  std::string text;
  for (const auto& r : records) text += r.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return text;
}

std::string unit_key(int64_t repeat, const std::string& prompt) { return std::to_string(repeat) + "/" + prompt; }

std::string unit_key(const json& record) {
  return unit_key(record.at("repeat").get<int64_t>(), record.at("prompt").get<std::string>());
}

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

void RunStore::commit_unit(const std::vector<json>& samples, const json& unit) const {
  if (!samples.empty()) append_records(path("samples.jsonl"), jsonl_text(samples));
  append_records(path("units.jsonl"), jsonl_text({unit}));
}

void RunStore::write_cells(const std::vector<CellMetrics>& cells) const {
  std::vector<json> records;
  for (const auto& c : cells) records.push_back(to_json(c));
  write_atomic(path("cells.jsonl"), jsonl_text(records));
}

void RunStore::commit_cell(const std::vector<json>& samples, const CellMetrics& metrics) const {
  if (!samples.empty()) append_records(path("samples.jsonl"), jsonl_text(samples));
  append_records(path("cells.jsonl"), jsonl_text({to_json(metrics)}));
}

// results_root/experiment, refusing any experiment name that could leave the root ("..",
// "a/b", "/abs"): the harness writes only below the results root unless --out says otherwise.
fs::path experiment_dir(const std::string& results_root, const std::string& experiment) {
  check_experiment_name(experiment, "results folder for experiment");
  return fs::path(results_root) / experiment;
}

std::string new_run_dir(const std::string& results_root, const std::string& experiment) {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
  fs::path base = experiment_dir(results_root, experiment) / buf;
  // Two runs started in the same second get distinct folders.
  fs::path dir = base;
  for (int i = 2; fs::exists(dir); ++i) dir = base.string() + "-" + std::to_string(i);
  return dir.string();
}

std::string latest_run_dir(const std::string& results_root, const std::string& experiment) {
  const fs::path root = experiment_dir(results_root, experiment);
  if (!fs::is_directory(root)) return "";
  std::string best;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "config.yaml") && e.path().string() > best) best = e.path().string();
  return best;
}

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

std::string command_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}
}  // namespace

json collect_env(int threads, const std::string& repo_root) {
  json env;
  env["cpu_model"] = cpu_model();
  env["cores"] = std::thread::hardware_concurrency();
  env["threads"] = threads;
  env["git_revision"] = command_output("git -C '" + repo_root + "' rev-parse HEAD 2>/dev/null");
  env["git_dirty"] = !command_output("git -C '" + repo_root + "' status --porcelain 2>/dev/null | head -1").empty();
  env["start_time"] = utc_now_iso();
  // Which node ran it: the figures of a run spread over a cluster (specdec run --executor
  // slurm) are only comparable within one node, so each shard's env names its node and job.
  char host[256] = {};
  env["hostname"] = ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  if (const char* job = std::getenv("SLURM_JOB_ID")) {
    env["slurm_job_id"] = job;
    const char* array = std::getenv("SLURM_ARRAY_JOB_ID");
    const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
    if (array && task) env["slurm_array_job"] = std::string(array) + "_" + task;
  }
  return env;
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace specdec::harness
