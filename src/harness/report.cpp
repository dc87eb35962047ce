#include "harness/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/results.h"

namespace specdec::harness {

using nlohmann::json;
namespace fs = std::filesystem;

std::string format_params(const std::map<std::string, std::string>& params) {
  if (params.empty()) return "-";
  std::string s;
  for (const auto& [k, v] : params) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

namespace {
std::string fmt(double v, int prec = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

// Milliseconds to about 3 significant digits: 0.0312, 0.250, 2.25, 12.50, 190.3.
std::string fmt_ms(double v) { return fmt(v, v >= 100 ? 1 : v >= 1 ? 2 : v >= 0.1 ? 3 : 4); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string checks_verdict(const CellMetrics& m) {
  if (m.checks.empty()) return "none";
  return m.checks_passed() ? "pass" : "FAIL";
}

// A cell whose controller stepped aside in every round drafted nothing, but is speculative.
bool is_speculative(const CellMetrics& m) {
  return m.n_drafted > 0 || !m.acceptance_per_position.empty() || !m.gamma_rounds.empty();
}

// "quiet", "unknown (...)", or the warning marker of a contended cell.
std::string load_marker(const LoadSample& l) {
  if (l.contended()) return "⚠ contended (" + l.describe() + ")";
  if (l.quiet() || !l.known()) return l.verdict();
  return std::string(l.verdict()) + " (" + l.describe() + ")";
}

// CSV columns of one side's phase breakdown: wall, rounds, then ms and fraction per phase.
std::string phase_csv_header(const std::string& prefix) {
  std::string h = prefix + "wall_ms," + prefix + "n_rounds";
  for (const auto& f : strategies::PhaseTimes::fields())
    h += "," + prefix + "ms_" + f.name + "," + prefix + "frac_" + f.name;
  return h;
}

std::string phase_csv_fields(const PhaseBreakdown& p) {
  std::string r = fmt(p.wall_ms, 3) + "," + std::to_string(p.n_rounds);
  for (const auto& f : strategies::PhaseTimes::fields()) r += "," + fmt(p.ms.*f.ms, 3) + "," + fmt(p.fraction(f.ms), 4);
  return r;
}
}  // namespace

json metrics_json(const RunInfo& info, const std::vector<CellMetrics>& cells) {
  json j;
  j["experiment"] = info.experiment;
  j["run_id"] = info.run_id;
  j["target"] = info.target;
  j["draft"] = info.draft;
  j["n_cells_planned"] = info.n_cells_planned;
  j["n_cells_finished"] = cells.size();
  j["cells"] = json::array();
  bool all_pass = true;
  for (const auto& c : cells) {
    j["cells"].push_back(to_json(c));
    all_pass = all_pass && c.checks_passed();
  }
  j["checks_passed"] = all_pass;
  return j;
}

std::string summary_csv(const std::vector<CellMetrics>& cells) {
  std::ostringstream os;
  os << "key,label,strategy,params,n_prompts,n_repeats,tok_s_median,tok_s_min,tok_s_max,ms_per_token,ttft_ms,"
        "baseline,baseline_tok_s,speedup_median,speedup_min,speedup_max,alpha,tau,gamma,cost_ratio,"
        "predicted_speedup,measured_over_predicted,checks,"
     << phase_csv_header("") << ',' << phase_csv_header("base_")
     << ",load,contended,foreign_cores,steal_fraction,loadavg_max,involuntary_switches_per_s\n";
  for (const auto& m : cells) {
    os << csv_field(m.cell.key) << ',' << csv_field(m.cell.label) << ',' << csv_field(m.cell.strategy) << ','
       << csv_field(format_params(m.cell.params)) << ',' << m.n_prompts << ',' << m.n_repeats << ','
       << fmt(m.tok_s.median, 3) << ',' << fmt(m.tok_s.min, 3) << ',' << fmt(m.tok_s.max, 3) << ','
       << fmt(m.ms_per_token, 3) << ',' << fmt(m.ttft_ms, 3) << ',' << csv_field(m.baseline) << ','
       << fmt(m.baseline_tok_s.median, 3) << ',' << fmt(m.speedup.median, 4) << ',' << fmt(m.speedup.min, 4) << ','
       << fmt(m.speedup.max, 4) << ',' << fmt(m.alpha, 4) << ',' << fmt(m.tau, 4) << ',' << m.gamma << ','
       << fmt(m.cost_ratio, 4) << ',' << fmt(m.predicted_speedup, 4) << ',' << fmt(m.measured_over_predicted, 4)
       << ',' << checks_verdict(m) << ',' << phase_csv_fields(m.phases) << ',' << phase_csv_fields(m.baseline_phases)
       << ',' << m.load.verdict() << ',' << (m.load.contended() ? "true" : "false") << ','
       << fmt(m.load.foreign_cores, 3) << ',' << fmt(m.load.steal_fraction, 4) << ',' << fmt(m.load.loadavg_max, 2)
       << ',' << fmt(m.load.involuntary_switches_per_s, 1) << '\n';
  }
  return os.str();
}

namespace {
void performance_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  os << "## Performance per strategy and sweep point\n\n"
     << "Speedup = candidate tok/s / baseline tok/s, measured interleaved (baseline, candidate, ...) in this "
        "process; median [min, max] over repeats. Predicted = Leviathan et al. "
        "(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)).\n\n"
     << "Stepped aside = the rounds whose draft length the controller chose 0 (plain decoding), and in "
        "brackets the share of tokens they emitted.\n\n";
  // Structured output's columns, each only where some cell has such tokens: the share of the
  // output its grammar forced, the share its jump-forward tokens took (of those drafted, how
  // many were accepted), the share of the drafted tokens it refused.
  struct Column {
    const char* name;
    const char* legend;
    std::function<bool(const CellMetrics&)> has;           // the column is shown where a cell has
    std::function<std::string(const CellMetrics&)> cell;  // its entry ("-": none)
  };
  const std::vector<Column> all = {
      {"forced", "Forced = the share of the generated tokens the grammar forced (drafted without the drafter).",
       [](const CellMetrics& m) { return m.n_forced > 0; },
       [](const CellMetrics& m) { return m.n_forced > 0 ? fmt(100 * m.forced_share(), 1) + "%" : "-"; }},
      {"jump", "Jump = the share of the generated tokens that were the grammar's jump-forward tokens (drafted "
               "without the drafter, verified), and in brackets those accepted of those drafted.",
       [](const CellMetrics& m) { return m.n_jump_drafted > 0; },
       [](const CellMetrics& m) {
         return m.n_jump_drafted == 0 ? std::string("-")
                                      : fmt(100 * m.jump_share(), 1) + "% (" + std::to_string(m.n_jump) + "/" +
                                            std::to_string(m.n_jump_drafted) + ")";
       }},
      {"refused", "Refused = the share of the drafted tokens the grammar refused where they stood (each rejected; "
                  "a drafter that drafts inside the grammar, draft_mask, has none).",
       [](const CellMetrics& m) { return m.n_refused > 0; },
       [](const CellMetrics& m) { return is_speculative(m) && m.n_drafted > 0 ? fmt(100 * m.refused_share(), 1) + "%" : "-"; }},
  };
  std::vector<const Column*> extra;
  for (const Column& c : all)
    if (std::any_of(cells.begin(), cells.end(), c.has)) {
      extra.push_back(&c);
      os << c.legend << "\n\n";
    }
  os << "| strategy | params | tok/s | ms/token | TTFT ms | baseline | speedup | alpha | tau | stepped aside | ";
  for (const Column* c : extra) os << c->name << " | ";
  os << "c | predicted | measured/predicted | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";
  for (size_t i = 0; i < extra.size(); ++i) os << "---|";
  os << "\n";
  for (const auto& m : cells) {
    const bool spec = is_speculative(m);
    os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " | " << fmt(m.tok_s.median) << " | "
       << fmt(m.ms_per_token) << " | " << fmt(m.ttft_ms) << " | " << (m.baseline.empty() ? "(self)" : m.baseline)
       << " | " << fmt(m.speedup.median, 3) << " [" << fmt(m.speedup.min, 3) << ", " << fmt(m.speedup.max, 3)
       << "] | " << (spec ? fmt(m.alpha, 3) : "-") << " | " << (spec ? fmt(m.tau, 3) : "-") << " | "
       << (spec && !m.gamma_rounds.empty()
               ? fmt(100 * m.aside_round_share(), 1) + "% (" + fmt(100 * m.aside_token_share(), 1) + "%)"
               : "-")
       << " | ";
    for (const Column* c : extra) os << c->cell(m) << " | ";
    os << (spec ? fmt(m.cost_ratio, 3) : "-") << " | " << (spec && m.gamma > 0 ? fmt(m.predicted_speedup, 3) : "-")
       << " | " << (spec && m.gamma > 0 ? fmt(m.measured_over_predicted, 3) : "-") << " | " << load_marker(m.load)
       << " |\n";
  }
  os << "\n";
}

// Warns above the tables when any figure was taken on a busy machine.
void load_note(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  int64_t n = 0;
  for (const auto& m : cells) n += m.load.contended();
  if (n == 0) return;
  os << "> ⚠ **" << n << " of " << cells.size() << " cells were measured on a contended machine**: during their "
     << "measurement other processes used at least " << fmt(kContendedForeignCores) << " cores on average, or the "
     << "hypervisor stole at least " << fmt(100 * kContendedStealFraction, 0) << "% of the CPU time (column "
     << "\"load\"). Their tok/s, speedup and phase figures are not to be trusted; rerun them on a quiet machine "
     << "before comparing.\n\n";
}

// One row per cell: where the candidate's wall time went, as % of it and ms per round.
void phase_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  bool any = false;
  for (const auto& m : cells) any = any || m.phases.n_generations > 0;
  if (!any) return;
  const auto& fields = strategies::PhaseTimes::fields();
  os << "## Where the time goes\n\n"
     << "The candidate's wall time over its measured generations, split into phases: % of wall (ms per round). "
        "A round is a verification round (autoregressive strategies: one decode step). draft_catchup is the part of "
        "draft spent in each round's first draft forward (it feeds the tokens the previous round committed). "
        "unattributed = wall - the phases (time outside the strategy's own clock; near 0).\n\n"
     << "| strategy | params | ms/round |";
  for (const auto& f : fields) os << ' ' << f.name << " |";
  os << " unattributed |\n|---|---|---|";
  for (size_t i = 0; i <= fields.size(); ++i) os << "---|";
  os << "\n";
  for (const auto& m : cells) {
    const PhaseBreakdown& p = m.phases;
    if (p.n_generations == 0) continue;
    os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " | "
       << (p.n_rounds ? fmt_ms(p.wall_ms / p.n_rounds) : "-") << " |";
    for (const auto& f : fields)
      os << ' ' << fmt(100 * p.fraction(f.ms), 1) << "% (" << (p.n_rounds ? fmt_ms(p.per_round(f.ms)) : "-") << ") |";
    os << ' ' << fmt(p.wall_ms > 0 ? 100 * (1 - p.ms.sum() / p.wall_ms) : 0, 1) << "% |\n";
  }
  os << "\n";
}

// Cells with several drafters (speculative's drafters): each drafter's share of the rounds, and
// its acceptance in the rounds it drafted.
void drafter_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  if (std::none_of(cells.begin(), cells.end(), [](const CellMetrics& m) { return !m.per_drafter.empty(); })) return;
  os << "## Drafters chosen\n\nCells with several drafters: the rounds the controller chose each drafter to "
        "draft (% of all rounds) and its acceptance in them.\n\n| strategy | params | drafter | rounds | alpha |\n"
        "|---|---|---|---|---|\n";
  for (const auto& m : cells)
    for (const auto& [name, c] : m.per_drafter)
      os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " | " << name << " | "
         << fmt(m.n_rounds ? 100.0 * double(c.rounds) / double(m.n_rounds) : 0.0, 1) << "% | "
         << (c.drafted ? fmt(double(c.accepted) / double(c.drafted), 3) : "-") << " |\n";
  os << "\n";
}

void acceptance_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  size_t width = 0;
  for (const auto& m : cells) width = std::max(width, m.acceptance_per_position.size());
  if (width == 0) return;
  os << "## Acceptance by draft position\n\nFraction of rounds that drafted position i and accepted it.\n\n"
     << "| strategy | params |";
  for (size_t i = 0; i < width; ++i) os << " pos " << i + 1 << " |";
  os << "\n|---|---|";
  for (size_t i = 0; i < width; ++i) os << "---|";
  os << "\n";
  for (const auto& m : cells) {
    if (m.acceptance_per_position.empty()) continue;
    os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " |";
    for (size_t i = 0; i < width; ++i)
      os << ' ' << (i < m.acceptance_per_position.size() ? fmt(m.acceptance_per_position[i], 3) : "-") << " |";
    os << "\n";
  }
  os << "\n";
}

// Category columns: Spec-Bench's six groups in its paper's order, then any other category
// alphabetically.
std::vector<std::string> category_columns(const std::vector<CellMetrics>& cells) {
  std::set<std::string> all;
  for (const auto& m : cells)
    for (const auto& [cat, c] : m.categories) all.insert(cat);
  std::vector<std::string> out;
  for (const char* group : {"multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag"})
    if (all.erase(group)) out.push_back(group);
  out.insert(out.end(), all.begin(), all.end());
  return out;
}

std::string times(double x) { return fmt(x) + "x"; }

// Spec-Bench's table: methods x categories (speedup), mean accepted tokens, overall.
void category_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  bool any = false;
  for (const auto& m : cells) any = any || m.categories.size() > 1;
  if (!any) return;
  const auto cols = category_columns(cells);
  os << "## Speedup per prompt category (Spec-Bench's table)\n\n"
        "Speedup as Spec-Bench defines it: the mean over questions of a method's tokens per second (every turn "
        "of a question and its prefill included) divided by the same mean of the autoregressive baseline. "
        "Mean accepted tokens: tokens per target forward that yields tokens, the bonus token included (1.00 for "
        "autoregressive decoding). Decode only: the ratio of decode speeds, prefill time and the prefill's token "
        "left out.\n\n| method | params |";
  for (const auto& c : cols) os << ' ' << c << " |";
  os << " mean accepted tokens | overall | decode only |\n|---|---|";
  for (size_t i = 0; i < cols.size() + 3; ++i) os << "---|";
  os << "\n";
  const CellMetrics* with_baseline = nullptr;
  for (const auto& m : cells) {
    const bool base = !m.baseline.empty();
    if (base && !with_baseline) with_baseline = &m;
    os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " |";
    for (const auto& c : cols) {
      const auto it = m.categories.find(c);
      os << ' ' << (base && it != m.categories.end() ? times(it->second.mean_speedup) : "-") << " |";
    }
    os << ' ' << fmt(m.tau) << " | " << (base ? times(m.mean_speedup) : "-") << " | "
       << (base ? times(m.decode_speedup) : "-") << " |\n";
  }
  os << "\nQuestions per category:";
  const CellMetrics& any_cell = with_baseline ? *with_baseline : cells.front();
  for (const auto& c : cols) {
    const auto it = any_cell.categories.find(c);
    os << ' ' << c << ' ' << (it != any_cell.categories.end() ? it->second.n_prompts : 0) << ';';
  }
  if (with_baseline) {
    os << " autoregressive baseline, mean tok/s:";
    for (const auto& c : cols) {
      const auto it = with_baseline->categories.find(c);
      if (it != with_baseline->categories.end()) os << ' ' << c << ' ' << fmt(it->second.mean_baseline_tok_s) << ';';
    }
    os << " overall " << fmt(with_baseline->mean_baseline_tok_s);
  }
  os << ".\n\n";
}

void checks_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  os << "## Distribution checks\n\n";
  bool any = false;
  for (const auto& m : cells) any = any || !m.checks.empty();
  if (!any) {
    os << "No checks applied to the finished cells.\n\n";
    return;
  }
  os << "| strategy | params | check | N | p-value | significance | detectable TV (80% power) | verdict | detail "
        "|\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : cells)
    for (const auto& c : m.checks)
      os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " | " << c.name << " | "
         << c.n_samples << " | " << (c.p_value >= 0 ? fmt(c.p_value, 4) : "-") << " | "
         << (c.significance > 0 ? fmt(c.significance, 4) : "-") << " | "
         << (c.detectable_tv > 0 ? fmt(c.detectable_tv, 3) : "-") << " | " << (c.pass ? "pass" : "**FAIL**")
         << " | " << c.detail << " |\n";
  os << "\n";
}

// checks.valid: per cell, how many constrained outputs are whole strings of their language.
void valid_table(std::ostringstream& os, const std::vector<CellMetrics>& cells) {
  bool any = false;
  for (const auto& m : cells) any = any || m.n_constrained > 0;
  if (!any) return;
  os << "## Structured output (checks.valid)\n\nMeasured outputs that are complete strings of their constraint's "
        "language (a structure cut by max_new_tokens is not).\n\n"
     << "| strategy | params | valid | constrained outputs | rate |\n|---|---|---|---|---|\n";
  for (const auto& m : cells)
    if (m.n_constrained > 0)
      os << "| " << m.cell.label << " | " << format_params(m.cell.params) << " | " << m.n_valid << " | "
         << m.n_constrained << " | " << fmt(double(m.n_valid) / double(m.n_constrained), 3) << " |\n";
  os << "\n";
}

// "- load: 1-min load average 0.12 at start, 0.30 at end; 0 of 4 cells contended".
void load_line(std::ostringstream& os, const RunInfo& info, const std::vector<CellMetrics>& cells) {
  int64_t n_contended = 0, n_quiet = 0;
  for (const auto& m : cells) {
    n_contended += m.load.contended();
    n_quiet += m.load.quiet();
  }
  const json load = info.env.is_object() ? info.env.value("load", json::object()) : json::object();
  const double start = load.value("loadavg_start", -1.0), end = load.value("loadavg_end", -1.0);
  os << "- load: 1-min load average " << (start >= 0 ? fmt(start) : "?") << " at start, "
     << (end >= 0 ? fmt(end) : "?") << " at end; " << n_contended << " of " << cells.size() << " cells contended";
  const int64_t n_unknown = static_cast<int64_t>(cells.size()) - n_contended - n_quiet;
  if (n_unknown > 0) os << " (" << n_unknown << " unknown)";
  if (load.contains("n_prompts_contended"))  // interleave: prompt judges each prompt too
    os << "; " << load.value("n_prompts_contended", int64_t{0}) << " of " << load.value("n_prompts_done", int64_t{0})
       << " prompts contended";
  os << "\n";
}

// A merged run (specdec merge, specdec run --executor slurm): which node ran which shard.
void shards_table(std::ostringstream& os, const RunInfo& info) {
  if (!info.env.is_object() || !info.env.contains("shards")) return;
  os << "## Nodes: which node ran what\n\n"
     << "Merged from " << info.env["shards"].size() << " shards. Every speedup compares a candidate with the "
     << "baseline run on the same node (interleaved right before it, or on the same prompt), never across "
     << "nodes. The machine line above is the merging node's; each shard's env.json is kept in env.json's "
     << "`shards`.\n\n";
  // Shards from different machines (by CPU model and kernels): a figure averaged over prompts
  // pools the machines' speeds, so it leans toward the prompts the faster machine ran.
  std::set<std::string> machines;
  for (const auto& sh : info.env["shards"]) {
    const json env = sh.value("env", json::object()), k = env.value("kernels", json::object());
    const bool known = k.is_object() && !k.empty();  // as the machine line above reads them
    machines.insert(env.value("cpu_model", "?") +
                    (known ? " (fp32 " + k.value("fp32", "?") + ", int8 " + k.value("int8", "?") + ")" : ""));
  }
  if (machines.size() > 1) {
    os << "⚠ **The shards ran on " << machines.size() << " different machines**:";
    for (const auto& m : machines) os << ' ' << m << ';';
    os << " each prompt's speedup is measured on one of them, but a figure averaged over prompts (tok/s, "
          "Spec-Bench's per-category and overall speedups) weighs every prompt by its machine's speed, so it "
          "leans toward the prompts the faster machine ran. Compare the shards' own reports, or runs whose "
          "prompts split the same way.\n\n";
  }
  os << "| shard | node | Slurm job | CPU | threads | started | ended | contended | ran |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& sh : info.env["shards"]) {
    const json env = sh.value("env", json::object());
    const json load = env.value("load", json::object());
    const bool by_prompt = sh.contains("prompts");
    const json ran = by_prompt ? sh["prompts"] : sh.value("cells", json::array());
    std::string list;
    for (size_t i = 0; i < ran.size() && i < 4; ++i) list += (i ? ", " : "") + ran[i].get<std::string>();
    for (size_t p = list.find('|'); p != std::string::npos; p = list.find('|', p + 2)) list.insert(p, "\\");  // cell keys hold '|'

    if (ran.size() > 4) list += ", ...";
    const std::string contended =
        by_prompt ? std::to_string(load.value("n_prompts_contended", int64_t{0})) + " of " +
                        std::to_string(load.value("n_prompts_done", int64_t{0})) + " prompts"
                  : std::to_string(load.value("n_cells_contended", int64_t{0})) + " of " +
                        std::to_string(load.value("n_cells", int64_t{0})) + " cells";
    os << "| " << (sh.contains("task") ? "task " + sh["task"].dump() : sh.value("dir", "?")) << " | "
       << sh.value("node", "?") << " | " << env.value("slurm_array_job", env.value("slurm_job_id", "-")) << " | "
       << env.value("cpu_model", "?") << " | " << env.value("threads_in_use", env.value("threads", 0)) << " | "
       << env.value("start_time", "?") << " | " << env.value("end_time", "?") << " | " << contended << " | "
       << ran.size() << (by_prompt ? " prompts" : " cells") << ": " << list << " |\n";
  }
  os << "\n";
}
}  // namespace

std::string report_markdown(const RunInfo& info, const std::vector<CellMetrics>& cells,
                            const std::vector<std::string>& plots) {
  std::ostringstream os;
  os << "# " << info.experiment << " — run " << info.run_id << "\n\n";
  if (!info.description.empty()) os << info.description << "\n\n";
  os << "- target: " << info.target << (info.draft.empty() ? "" : ", draft: " + info.draft) << "\n";
  if (info.env.is_object()) {
    os << "- machine: " << info.env.value("cpu_model", "?") << ", " << info.env.value("cores", 0) << " cores, "
       << info.env.value("threads_in_use", info.env.value("threads", 0)) << " threads; LibTorch "
       << info.env.value("libtorch_version", "?")
       << "; BLAS " << info.env.value("blas", "?");
    if (const auto k = info.env.find("kernels"); k != info.env.end() && k->is_object())
      os << "; kernels " << k->value("fp32", "?") << " / int8 " << k->value("int8", "?");
    os << "\n"
       << "- git " << info.env.value("git_revision", "?") << "; started " << info.env.value("start_time", "?")
       << (info.env.contains("end_time") ? ", ended " + info.env.value("end_time", "") : "") << "\n";
  }
  load_line(os, info, cells);
  bool all_pass = true;
  for (const auto& m : cells) all_pass = all_pass && m.checks_passed();
  os << "- cells finished: " << cells.size() << " of " << info.n_cells_planned
     << "; checks: " << (all_pass ? "all pass" : "**SOME FAIL**") << "\n\n";
  load_note(os, cells);
  performance_table(os, cells);
  phase_table(os, cells);
  drafter_table(os, cells);
  acceptance_table(os, cells);
  category_table(os, cells);
  checks_table(os, cells);
  valid_table(os, cells);
  shards_table(os, info);
  if (!plots.empty()) {
    os << "## Plots\n\n";
    for (const auto& p : plots) os << "![" << p << "](" << p << ")\n\n";
  }
  if (!info.context_markdown.empty()) os << "## Context (not measured in this run)\n\n" << info.context_markdown << "\n";
  return os.str();
}

std::string compare_runs(const std::string& run_a, const std::string& run_b) {
  for (const auto& r : {run_a, run_b})
    SD_CHECK(fs::exists(fs::path(r) / "cells.jsonl"), "run folder '", r, "' has no cells.jsonl (not a run?)");
  const auto a = RunStore(run_a).load_finished();
  const auto b = RunStore(run_b).load_finished();
  std::map<std::string, std::pair<const CellMetrics*, const CellMetrics*>> rows;
  std::vector<std::string> order;
  for (const auto& m : a) {
    if (!rows.count(m.cell.key)) order.push_back(m.cell.key);
    rows[m.cell.key].first = &m;
  }
  for (const auto& m : b) {
    if (!rows.count(m.cell.key)) order.push_back(m.cell.key);
    rows[m.cell.key].second = &m;
  }
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-60s | %10s %9s %7s | %10s %9s %7s | %7s\n", "cell", "A tok/s", "A speedup",
                "A alpha", "B tok/s", "B speedup", "B alpha", "B/A tok");
  os << "A: " << run_a << "\nB: " << run_b << "\n" << line << std::string(136, '-') << "\n";
  // A contended cell's tok/s carries a '!' (its figures are not to be trusted).
  auto part = [](const CellMetrics* m) -> std::string {
    char buf[64];
    if (!m) return "         -         -       -";
    std::snprintf(buf, sizeof buf, "%9.2f%s %9.3f %7.3f", m->tok_s.median, m->load.contended() ? "!" : " ",
                  m->speedup.median, m->alpha);
    return buf;
  };
  bool any_contended = false;
  for (const auto& key : order) {
    const auto& [ma, mb] = rows[key];
    std::string ratio = "-";
    if (ma && mb && ma->tok_s.median > 0) ratio = fmt(mb->tok_s.median / ma->tok_s.median, 3);
    std::string name = key.size() > 60 ? key.substr(0, 57) + "..." : key;
    std::snprintf(line, sizeof line, "%-60s | %s | %s | %7s\n", name.c_str(), part(ma).c_str(), part(mb).c_str(),
                  ratio.c_str());
    os << line;
    any_contended = any_contended || (ma && ma->load.contended()) || (mb && mb->load.contended());
  }
  if (any_contended)
    os << "! measured on a contended machine (other processes used >= " << fmt(kContendedForeignCores)
       << " cores, or steal >= " << fmt(100 * kContendedStealFraction, 0)
       << "%): not to be trusted, see the run's report.md\n";
  return os.str();
}

}  // namespace specdec::harness
