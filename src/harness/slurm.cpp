#include "harness/slurm.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/merge.h"
#include "harness/results.h"

namespace specdec::harness {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kPromptsPerShard = 20;  // default prompt shard: a few model loads per hour of work

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A shell word in single quotes.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

fs::path slurm_dir(const std::string& run_dir) { return fs::path(run_dir) / "slurm"; }

struct Shell {
  int code = -1;
  std::string out;  // stdout + stderr
};
Shell shell(const std::string& cmd) {
  Shell r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  SD_CHECK(p, "cannot run '", cmd, "'");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == '\r')) r.out.pop_back();
  return r;
}

// The #SBATCH lines both scripts share: working directory, CPUs, the user's --slurm-opt.
std::string common_directives(const ExperimentConfig& cfg, const SlurmOptions& opt) {
  std::ostringstream os;
  os << "#SBATCH --chdir=" << opt.workdir << "\n";
  bool has_cpus = false;
  for (const auto& o : opt.sbatch) has_cpus = has_cpus || o.rfind("cpus-per-task", 0) == 0;
  if (!has_cpus) os << "#SBATCH --cpus-per-task=" << cfg.target.threads << "  # models.threads\n";
  for (const auto& o : opt.sbatch) os << "#SBATCH --" << o << "\n";
  return os.str();
}

std::string setup_lines(const SlurmOptions& opt) {
  std::string s;
  for (const auto& l : opt.setup) s += l + "\n";
  return s;
}

std::string range_text(const SlurmRun& run, const SlurmShard& s) {
  return run.unit + " " + std::to_string(s.begin) + ":" + std::to_string(s.end);
}

void check_sbatch_options(const SlurmOptions& opt) {
  static const std::regex key_re("[A-Za-z][A-Za-z0-9_-]*");
  for (const auto& o : opt.sbatch) {
    const std::string key = o.substr(0, o.find('='));
    SD_CHECK(std::regex_match(key, key_re) && o.find('\n') == std::string::npos, "--slurm-opt '", o,
             "': expected KEY=VALUE (an sbatch option without its dashes, e.g. partition=short, time=02:00:00)");
    for (const char* own : {"array", "output", "error", "dependency", "chdir", "parsable", "wrap"})
      SD_CHECK(key != own, "--slurm-opt '", o, "': --", own, " is set by specdec itself (see RUN_DIR/slurm/*.sbatch)");
  }
  for (const auto& l : opt.setup)
    SD_CHECK(l.find('\n') == std::string::npos, "--slurm-setup '", l, "': one shell line per --slurm-setup");
}

}  // namespace

std::string SlurmRun::shard_dir(int64_t task) const { return (fs::path(dir) / "shards" / std::to_string(task)).string(); }

std::pair<int64_t, int64_t> parse_index_range(const std::string& text, const std::string& what) {
  static const std::regex re("([0-9]{1,9}):([0-9]{0,9})");
  std::smatch m;
  SD_CHECK(std::regex_match(text, m, re), what, " '", text, "': expected A:B (0-based, B exclusive; A: to the end)");
  const int64_t a = std::stoll(m[1]), b = m[2].length() ? std::stoll(m[2]) : -1;
  SD_CHECK(b < 0 || b > a, what, " '", text, "' is an empty range (need A < B)");
  return {a, b};
}

bool is_slurm_run(const std::string& dir) { return fs::exists(slurm_dir(dir) / "plan.json"); }

void write_slurm_scripts(const SlurmRun& run, const ExperimentConfig& cfg, const SlurmOptions& opt) {
  check_sbatch_options(opt);
  const fs::path sd = slurm_dir(run.dir);
  fs::create_directories(sd / "logs");
  const std::string name = "specdec-" + cfg.name;
  const std::string extra = opt.threads_oversubscribe ? " --threads-oversubscribe" : "";
  std::ostringstream a;
  a << "#!/bin/bash\n"
    << "# Written by `specdec run --executor slurm` (experiment " << cfg.name << "): one array task per shard,\n"
    << "# each an ordinary `specdec run` into " << run.dir << "/shards/<task>/. Submit with\n"
    << "#   sbatch --parsable " << (sd / "array.sbatch").string() << "   (--array=2,5 to run only those tasks)\n"
    << "#SBATCH --job-name=" << name << "\n"
    << "#SBATCH --array=0-" << run.shards.size() - 1 << "\n"
    << "#SBATCH --output=" << (sd / "logs").string() << "/task-%a_%A.log\n"
    << common_directives(cfg, opt) << setup_lines(opt) << "task=${SLURM_ARRAY_TASK_ID:?not a Slurm array task}\n"
    << "case $task in\n";
  for (const auto& s : run.shards) {
    a << "  " << s.task << ") args=(";
    if (run.unit == "cells")
      a << quote((sd / "experiment.yaml").string()) << " --cells " << s.begin << ":" << s.end;
    else
      a << quote((sd / ("shard-" + std::to_string(s.task) + ".yaml")).string());
    a << ") ;;\n";
  }
  a << "  *) echo \"specdec: no shard $task in this run\" >&2; exit 1 ;;\nesac\n"
    << "out=" << quote(run.dir) << "/shards/$task\n"
    << "resume=()\n"
    << "[ -f \"$out/config.yaml\" ] && resume=(--resume)  # a resubmitted task continues its shard\n"
    << "echo \"specdec: task $task on $(hostname) (job ${SLURM_JOB_ID:-?}): ${args[*]}\"\n"
    << quote(opt.specdec) << " run \"${args[@]}\" --out \"$out\" \"${resume[@]}\" --quiet" << extra << "\n"
    << "rc=$?\n"
    << "# 2 is a failed distribution check: a finished result (the merged report shows it), not a failed task.\n"
    << "[ $rc -eq 2 ] && rc=0\n"
    << "exit $rc\n";
  write_atomic((sd / "array.sbatch").string(), a.str());

  std::ostringstream m;
  m << "#!/bin/bash\n"
    << "# Written by `specdec run --executor slurm`: merges the shards into " << run.dir << "\n"
    << "# once every array task succeeded (submitted with --dependency=afterok:<array job>).\n"
    << "#SBATCH --job-name=" << name << "-merge\n"
    << "#SBATCH --output=" << (sd / "logs").string() << "/merge_%j.log\n"
    << "#SBATCH --kill-on-invalid-dep=yes\n"
    << common_directives(cfg, opt) << setup_lines(opt) << "exec " << quote(opt.specdec) << " merge "
    << quote(run.dir) << "\n";
  write_atomic((sd / "merge.sbatch").string(), m.str());
}

SlurmRun prepare_slurm_run(const ExperimentConfig& cfg, const Plan& plan, const std::string& run_dir,
                           const SlurmOptions& opt) {
  check_sbatch_options(opt);
  SD_CHECK(!fs::exists(fs::path(run_dir) / "config.yaml") && !is_slurm_run(run_dir), "'", run_dir,
           "' already holds a run; pass --resume to continue it or choose another --out");
  SlurmRun run;
  run.dir = fs::absolute(run_dir).lexically_normal().string();
  run.repeats = cfg.repeats;
  run.unit = cfg.interleave == "prompt" ? "prompts" : "cells";
  std::vector<std::string> units;
  if (run.unit == "cells")
    for (const auto& pc : plan.cells) units.push_back(pc.cell.key);
  else
    for (const auto& p : cfg.prompts) units.push_back(p.id);
  const auto n = static_cast<int64_t>(units.size());
  const int64_t n_shards =
      opt.shards > 0 ? opt.shards : run.unit == "cells" ? n : (n + kPromptsPerShard - 1) / kPromptsPerShard;
  SD_CHECK(n_shards >= 1 && n_shards <= n, "--slurm-shards ", opt.shards, ": the experiment has ", n, " ", run.unit,
           " to split (", cfg.file, "); give 1 to ", n);
  for (int64_t t = 0; t < n_shards; ++t) {
    SlurmShard s;
    s.task = t;
    s.begin = t * n / n_shards;
    s.end = (t + 1) * n / n_shards;
    s.units.assign(units.begin() + s.begin, units.begin() + s.end);
    run.shards.push_back(std::move(s));
  }
  const fs::path sd = slurm_dir(run.dir);
  fs::create_directories(sd);
  write_atomic((sd / "experiment.yaml").string(), to_yaml(cfg));
  if (run.unit == "prompts")
    for (const auto& s : run.shards) {
      ExperimentConfig shard = cfg;
      shard.prompts.assign(cfg.prompts.begin() + s.begin, cfg.prompts.begin() + s.end);
      write_atomic((sd / ("shard-" + std::to_string(s.task) + ".yaml")).string(), to_yaml(shard));
    }
  json shards = json::array();
  for (const auto& s : run.shards)
    shards.push_back({{"task", s.task}, {"begin", s.begin}, {"end", s.end}, {run.unit, s.units}});
  const json plan_json = {{"experiment", cfg.name}, {"unit", run.unit}, {"repeats", run.repeats}, {"shards", shards}};
  write_slurm_scripts(run, cfg, opt);
  write_atomic((sd / "plan.json").string(), plan_json.dump(2) + "\n");  // last: marks a complete slurm folder
  return run;
}

SlurmRun load_slurm_run(const std::string& run_dir) {
  const fs::path file = slurm_dir(run_dir) / "plan.json";
  SD_CHECK(fs::exists(file), "'", run_dir, "' is not the run folder of `specdec run --executor slurm` (no ",
           file.string(), ")");
  const json j = json::parse(text_of(file), nullptr, false);
  SD_CHECK(!j.is_discarded() && j.contains("shards"), file.string(), ": not a plan written by specdec");
  SlurmRun run;
  run.dir = fs::absolute(run_dir).lexically_normal().string();
  run.unit = j.at("unit").get<std::string>();
  run.repeats = j.at("repeats").get<int64_t>();
  for (const auto& s : j.at("shards"))
    run.shards.push_back({s.at("task").get<int64_t>(), s.at("begin").get<int64_t>(), s.at("end").get<int64_t>(),
                          s.at(run.unit).get<std::vector<std::string>>()});
  return run;
}

void check_same_experiment(const SlurmRun& run, const ExperimentConfig& cfg) {
  const std::string planned = text_of(slurm_dir(run.dir) / "experiment.yaml");
  const std::string diff = first_difference(planned, to_yaml(cfg));
  SD_CHECK(diff.empty(), "--resume: the experiment differs from the one planned in '", run.dir, "' (", diff,
           "); start a new run instead");
}

std::vector<ShardState> shard_states(const SlurmRun& run) {
  std::vector<ShardState> out;
  for (const auto& s : run.shards) {
    ShardState st;
    st.shard = s;
    st.n_planned = static_cast<int64_t>(s.units.size()) * (run.unit == "cells" ? 1 : run.repeats);
    // Read-only: a task that never ran has no folder (and RunStore would create one).
    const fs::path dir = run.shard_dir(s.task);
    if (fs::is_directory(dir)) {
      const RunStore store(dir.string());
      const std::set<std::string> mine(s.units.begin(), s.units.end());
      if (run.unit == "cells" && fs::exists(store.path("cells.jsonl")))
        for (const auto& c : store.load_records("cells.jsonl")) st.n_done += mine.count(c.at("key").get<std::string>());
      if (run.unit == "prompts" && fs::exists(store.path("units.jsonl")))
        st.n_done = static_cast<int64_t>(store.load_records("units.jsonl").size());
    }
    // The newest log of this task (a resubmitted task has one per attempt).
    const std::string prefix = "task-" + std::to_string(s.task) + "_";
    fs::file_time_type newest{};
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(slurm_dir(run.dir) / "logs", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0 || (!st.log.empty() && e.last_write_time() < newest)) continue;
      newest = e.last_write_time();
      st.log = e.path().string();
    }
    if (!st.log.empty()) {
      std::ifstream in(st.log);
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) st.log_tail = line;
    }
    out.push_back(std::move(st));
  }
  return out;
}

std::string describe_unfinished(const SlurmRun& run, const std::vector<ShardState>& states) {
  std::ostringstream os;
  for (const auto& st : states) {
    if (st.finished()) continue;
    os << "  task " << st.shard.task << " (" << range_text(run, st.shard) << "): " << st.n_done << " of "
       << st.n_planned << " " << run.unit << " finished; "
       << (st.log.empty() ? "no log (it never ran)" : "log: " + st.log + (st.log_tail.empty() ? "" : ": " + st.log_tail))
       << "\n";
  }
  return os.str();
}

namespace {
std::string task_list(const std::vector<int64_t>& tasks) {
  std::string s;
  for (int64_t t : tasks) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}
}  // namespace

std::vector<std::string> submit_commands(const SlurmRun& run, const std::vector<int64_t>& tasks) {
  const fs::path sd = slurm_dir(run.dir);
  if (tasks.empty()) return {"sbatch --parsable " + quote((sd / "merge.sbatch").string())};
  return {"sbatch --parsable --array=" + task_list(tasks) + " " + quote((sd / "array.sbatch").string()),
          "sbatch --parsable --dependency=afterok:<array job id> " + quote((sd / "merge.sbatch").string())};
}

Submitted submit_slurm_run(const SlurmRun& run, const std::vector<int64_t>& tasks) {
  SD_CHECK(shell("command -v sbatch").code == 0,
           "sbatch not found: run this on a Slurm login node, or write the scripts only (--no-submit)");
  const fs::path sd = slurm_dir(run.dir);
  // sbatch --parsable prints "<job id>" or "<job id>;<cluster>".
  auto sbatch = [](const std::string& args) {
    const Shell r = shell("sbatch --parsable " + args);
    SD_CHECK(r.code == 0 && !r.out.empty(), "sbatch ", args, " failed (exit ", r.code, "): ", r.out);
    const std::string line = r.out.substr(r.out.find_last_of('\n') == std::string::npos ? 0 : r.out.find_last_of('\n') + 1);
    return line.substr(0, line.find(';'));
  };
  Submitted s;
  if (!tasks.empty()) s.array_job = sbatch("--array=" + task_list(tasks) + " " + quote((sd / "array.sbatch").string()));
  s.merge_job = sbatch((s.array_job.empty() ? "" : "--dependency=afterok:" + s.array_job + " ") +
                       quote((sd / "merge.sbatch").string()));
  append_durable((sd / "submissions.jsonl").string(),
                 jsonl_text({{{"time", utc_now_iso()}, {"array_job", s.array_job}, {"merge_job", s.merge_job},
                              {"tasks", tasks}}}));
  return s;
}

std::vector<std::string> active_jobs(const SlurmRun& run) {
  const fs::path file = slurm_dir(run.dir) / "submissions.jsonl";
  if (!fs::exists(file)) return {};
  std::set<std::string> ours;
  for (const auto& s : RunStore(slurm_dir(run.dir).string()).load_records("submissions.jsonl"))
    for (const char* k : {"array_job", "merge_job"})
      if (!s.value(k, std::string()).empty()) ours.insert(s.at(k).get<std::string>());
  // One line per job, array tasks as <array id>_<task> (pending ones as <id>_[2-3]).
  const Shell r = shell("squeue -h -r -u \"$(id -un)\" -o %i");
  SD_CHECK(r.code == 0, "squeue failed (exit ", r.code, "): ", r.out);
  std::vector<std::string> out;
  std::istringstream in(r.out);
  for (std::string id; std::getline(in, id);)
    if (ours.count(id.substr(0, id.find('_')))) out.push_back(id);
  return out;
}

ExperimentConfig merge_slurm_run(const std::string& run_dir, json& shards_env) {
  const SlurmRun run = load_slurm_run(run_dir);
  const auto states = shard_states(run);
  const std::string unfinished = describe_unfinished(run, states);
  SD_CHECK(unfinished.empty(), "merge: '", run.dir, "': not every array task finished:\n", unfinished,
           "Resubmit them with: specdec run ", (slurm_dir(run.dir) / "experiment.yaml").string(),
           " --executor slurm --resume --out ", run.dir);
  // A merge done before (e.g. by hand, then by the merge job) is redone from the shards.
  for (const char* f : {"config.yaml", "samples.jsonl", "cells.jsonl", "units.jsonl"})
    fs::remove(fs::path(run.dir) / f);
  std::vector<std::string> dirs;
  for (const auto& s : run.shards) dirs.push_back(run.shard_dir(s.task));
  ExperimentConfig cfg = merge_shards(dirs, run.dir);
  shards_env = describe_shards(dirs);
  for (size_t i = 0; i < run.shards.size(); ++i) shards_env[i]["task"] = run.shards[i].task;
  return cfg;
}

}  // namespace specdec::harness
