// The controller (controller.h): draft-length control, and the cost tables it decides from.
#include "speculative/controller.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/durable_file.h"
#include "io/json_limits.h"
#include "strategies/strategy.h"

namespace specdec::strategies {

GammaMode parse_gamma_mode(const std::string& text) {
  if (text == "off") return GammaMode::off;
  if (text == "hf") return GammaMode::hf;
  if (text == "cost") return GammaMode::cost;
  fail("speculative: adaptive_gamma must be off, hf or cost, got '", text, "'");
}

// ---- cost tables ----------------------------------------------------------------------------

// The measured row counts, interpolated: between two measured counts a straight line, below the
// smallest the smallest's time, beyond the largest the slope of the last two (never negative).
// The int8 kernels' verify time is flat up to a panel of rows and then jumps (on 2 cores: 5 rows
// ~1.2x one row, 7 rows ~1.7x), which one line over every count cannot follow: fitted to 1-9
// rows it put 5 rows at 1.9x one row, and the controller chose chains of 1-2 where 4 pays. One
// count measured: each extra row costs 10 % of a 1-row step (CPU notes: 5 rows ~ 1.5x); none:
// 1 + 0.1 (rows - 1).
double StepCosts::verify_at(int64_t rows) const {
  if (verify_ms.empty()) return 1.0 + 0.1 * double(rows - 1);
  if (verify_ms.size() == 1) {
    const auto& [r, ms] = *verify_ms.begin();
    return ms * (1.0 + 0.1 * double(rows - 1)) / (1.0 + 0.1 * double(r - 1));
  }
  auto hi = verify_ms.lower_bound(rows);
  if (hi == verify_ms.begin()) return hi->second;
  const auto lo = std::prev(hi);
  if (hi == verify_ms.end()) {  // beyond the largest: the last two counts' slope
    const auto before = std::prev(lo);
    const double slope = std::max(0.0, (lo->second - before->second) / double(lo->first - before->first));
    return lo->second + slope * double(rows - lo->first);
  }
  if (hi->first == rows) return hi->second;
  const double w = double(rows - lo->first) / double(hi->first - lo->first);
  return std::max(1e-6, lo->second + w * (hi->second - lo->second));
}

namespace {

nlohmann::json read_costs_file(const std::string& path) {
  try {
    return io::read_json_file(path);
  } catch (const Error& e) {
    fail("controller_costs: ", e.what());
  }
}

// One table from its JSON object; `at` names it in messages (the file, and [i] in a list).
StepCosts parse_table(const nlohmann::json& j, const std::string& at) {
  const auto where = [&](const std::string& key) { return "controller_costs " + at + ": key '" + key + "'"; };
  SD_CHECK(j.is_object(), "controller_costs ", at, ": expected a JSON object (a cost table a calibrating run wrote)");
  for (const auto& [key, value] : j.items()) {
    (void)value;
    SD_CHECK(key == "drafter" || key == "verify_ms" || key == "verify_rounds" || key == "draft_ms_per_token" ||
                 key == "draft_rounds" || key == "draft_prefill_ms_per_token" || key == "acceptance",
             where(key), " is unknown (known: drafter, verify_ms, verify_rounds, draft_ms_per_token, draft_rounds, "
             "draft_prefill_ms_per_token, acceptance)");
  }
  const auto number = [&](const std::string& key, double lo, double hi, bool required) -> double {
    if (!j.contains(key)) {
      SD_CHECK(!required, where(key), " is missing");
      return -1;
    }
    const auto& v = j.at(key);
    SD_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo && v.get<double>() <= hi,
             where(key), " = ", v.dump(), ": must be a number in [", lo, ", ", hi, "]");
    return v.get<double>();
  };
  StepCosts c;
  SD_CHECK(j.contains("drafter") && j.at("drafter").is_string() && !j.at("drafter").get<std::string>().empty(),
           where("drafter"), " must be the drafter's name");
  c.drafter = j.at("drafter").get<std::string>();
  SD_CHECK(j.contains("verify_ms") && j.at("verify_ms").is_object() && !j.at("verify_ms").empty(), where("verify_ms"),
           " must be an object of target rows -> ms, e.g. {\"1\": 36.5, \"7\": 52.0}");
  const auto row_count = [&](const std::string& key, const std::string& rows) -> int64_t {
    size_t used = 0;
    long long r = 0;
    try {
      r = std::stoll(rows, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SD_CHECK(used == rows.size() && r >= 1 && r <= 257, where(key + "." + rows),
             ": the rows must be an integer in [1, 257]");
    return r;
  };
  for (const auto& [rows, ms] : j.at("verify_ms").items()) {
    const int64_t r = row_count("verify_ms", rows);
    SD_CHECK(ms.is_number() && std::isfinite(ms.get<double>()) && ms.get<double>() > 0, where("verify_ms." + rows),
             " = ", ms.dump(), ": must be a number of ms > 0");
    c.verify_ms[r] = ms.get<double>();
  }
  // The forwards behind each entry: what a calibrating run writes beside them (optional).
  if (j.contains("verify_rounds")) {
    SD_CHECK(j.at("verify_rounds").is_object(), where("verify_rounds"),
             " must be an object of target rows -> forwards");
    for (const auto& [rows, n] : j.at("verify_rounds").items()) {
      const int64_t r = row_count("verify_rounds", rows);
      SD_CHECK(n.is_number_integer() && n.get<int64_t>() >= 1, where("verify_rounds." + rows), " = ", n.dump(),
               ": must be a whole number of forwards >= 1");
      SD_CHECK(c.verify_ms.count(r) == 1, where("verify_rounds." + rows), ": verify_ms has no entry for ", r, " rows");
      c.verify_rounds[r] = n.get<int64_t>();
    }
  }
  if (j.contains("draft_rounds")) {
    const auto& n = j.at("draft_rounds");
    SD_CHECK(n.is_number_integer() && n.get<int64_t>() >= 0, where("draft_rounds"), " = ", n.dump(),
             ": must be a whole number of draft steps >= 0");
    c.draft_rounds = n.get<int64_t>();
  }
  // Absent where the calibrating run never chose this drafter (table_json writes only what it
  // measured): unmeasured, as in a fresh table.
  c.draft_ms_per_token = number("draft_ms_per_token", 0, 1e9, false);
  c.draft_prefill_ms_per_token = number("draft_prefill_ms_per_token", 0, 1e9, false);
  c.acceptance = number("acceptance", 0, 1, true);
  return c;
}

nlohmann::json table_json(const StepCosts& c) {
  nlohmann::json verify = nlohmann::json::object();
  for (const auto& [rows, ms] : c.verify_ms) verify[std::to_string(rows)] = ms;
  nlohmann::json j = {{"drafter", c.drafter}, {"verify_ms", verify}, {"acceptance", c.acceptance}};
  if (!c.verify_rounds.empty()) {
    nlohmann::json rounds = nlohmann::json::object();
    for (const auto& [rows, n] : c.verify_rounds) rounds[std::to_string(rows)] = n;
    j["verify_rounds"] = rounds;
  }
  // Only what was measured: a run that never drafted has no draft cost to give.
  if (c.draft_ms_per_token >= 0) j["draft_ms_per_token"] = c.draft_ms_per_token;
  if (c.draft_rounds > 0) j["draft_rounds"] = c.draft_rounds;
  if (c.draft_prefill_ms_per_token >= 0) j["draft_prefill_ms_per_token"] = c.draft_prefill_ms_per_token;
  return j;
}

}  // namespace

StepCosts StepCosts::read(const std::string& path) {
  const nlohmann::json j = read_costs_file(path);
  SD_CHECK(!j.is_array(), "controller_costs ", path, ": a list of ", j.size(),
           " tables (one per drafter, for speculative's drafters); this run takes one table");
  return parse_table(j, path);
}

std::vector<StepCosts> StepCosts::read_all(const std::string& path) {
  const nlohmann::json j = read_costs_file(path);
  if (!j.is_array()) return {parse_table(j, path)};
  SD_CHECK(!j.empty(), "controller_costs ", path, ": an empty list (expected one table per drafter)");
  std::vector<StepCosts> out;
  for (size_t i = 0; i < j.size(); ++i) {
    out.push_back(parse_table(j[i], path + "[" + std::to_string(i) + "]"));
    for (size_t k = 0; k < i; ++k)
      SD_CHECK(out[k].drafter != out[i].drafter, "controller_costs ", path, "[", i, "]: key 'drafter' = '",
               out[i].drafter, "' names the drafter of entry [", k, "] again (one table per drafter)");
  }
  return out;
}

void StepCosts::write(const std::string& path) const { write_all({*this}, path); }

void StepCosts::write_all(const std::vector<StepCosts>& tables, const std::string& path) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& t : tables) j.push_back(table_json(t));
  try {
    io::write_atomic(path, (tables.size() == 1 ? j[0] : j).dump(2) + "\n");
  } catch (const Error& e) {
    fail("controller_calibrate: ", e.what());
  }
}

CostTable::CostTable(StepCosts fixed) : costs_(std::move(fixed)), fixed_(true) {}

std::shared_ptr<CostTable> CostTable::of_pair(const std::shared_ptr<const void>& target,
                                              const std::shared_ptr<const void>& draft, const std::string& drafter,
                                              const std::string& config) {
  struct Entry {
    std::weak_ptr<const void> target, draft;
    std::shared_ptr<CostTable> table;
  };
  static std::mutex mu;
  static std::map<std::tuple<const void*, const void*, std::string, std::string>, Entry> tables;
  std::lock_guard<std::mutex> lock(mu);
  Entry& e = tables[{target.get(), draft.get(), drafter, config}];
  // A table outlives nothing it measured: models freed since (an address reused) start afresh.
  if (!e.table || e.target.lock() != target || e.draft.lock() != draft) {
    e = {target, draft, std::make_shared<CostTable>()};
    e.table->costs_.drafter = drafter;
    // The verify curve is the target's, whoever drafted: a new configuration starts from the
    // fullest curve the process has measured of this target (then measures its own).
    for (const auto& [key, other] : tables)
      if (std::get<0>(key) == target.get() && other.table && other.table != e.table && other.target.lock() == target) {
        StepCosts theirs = other.table->now();
        if (theirs.verify_ms.size() <= e.table->costs_.verify_ms.size()) continue;
        e.table->costs_.verify_ms = std::move(theirs.verify_ms);
        e.table->costs_.verify_rounds = std::move(theirs.verify_rounds);
      }
  }
  return e.table;
}

StepCosts CostTable::now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return costs_;
}

namespace {
// A measured ms and the samples behind it (n, counted here): their mean over the first five, then
// an exponential moving average of weight 0.2, so that the first samples count alike (the first
// outweighing none of the next), and later ones follow the machine as it changes.
void blend(double& slot, int64_t& n, double x) {
  const double w = std::max(1.0 / double(++n), 0.2);
  slot = n == 1 ? x : (1 - w) * slot + w * x;
}
}  // namespace

void CostTable::measure_round(const RoundOutcome& r) {
  if (fixed_) return;
  constexpr double decay = 0.999;  // ~the last 1000 rounds: the pair's acceptance over many requests, not the last one
  std::lock_guard<std::mutex> lock(mu_);
  judged_ = judged_ * decay + r.trials();
  accepted_ = accepted_ * decay + (r.judged ? double(r.accepted) : 0.0);
  costs_.acceptance = (accepted_ + 1.0) / (judged_ + 2.0);
  if (r.drafted > 0 && r.ms_draft >= 0)
    blend(costs_.draft_ms_per_token, costs_.draft_rounds, r.ms_draft / double(r.drafted));
  if (r.forward_rows() > 0) file_verify(r.forward_rows(), r.ms_verify);
}

void CostTable::measure_verify(int64_t rows, double ms) {
  if (fixed_ || rows <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  file_verify(rows, ms);
}

void CostTable::file_verify(int64_t rows, double ms) {
  blend(costs_.verify_ms[rows], costs_.verify_rounds[rows], ms);
}

void CostTable::measure_prefill(int64_t n_tokens, double ms) {
  if (fixed_ || n_tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  blend(costs_.draft_prefill_ms_per_token, prefills_, ms / double(n_tokens));
}

void CostTable::measure_length(int64_t n_tokens) {
  if (fixed_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (lengths_.size() >= 256) lengths_.erase(lengths_.begin());
  lengths_.push_back(n_tokens);
}

int64_t CostTable::expected_left(int64_t n, int64_t bound) const {
  std::lock_guard<std::mutex> lock(mu_);
  double sum = 0;
  int64_t count = 0;
  for (int64_t l : lengths_)
    if (l > n) sum += double(l - n), ++count;
  if (count < 4) return bound;
  return std::min(bound, static_cast<int64_t>(std::llround(sum / double(count))));
}

// ---- the controller ---------------------------------------------------------------------------

GammaController::GammaController(GammaMode mode, int64_t gamma, int64_t gamma_max, std::shared_ptr<CostTable> costs)
    : mode_(mode), gamma_(gamma), gamma_max_(gamma_max), arms_(1) {
  SD_CHECK(gamma >= 0 && gamma <= gamma_max, "gamma (", gamma, ") must be in [0, gamma_max = ", gamma_max, "]");
  if (mode_ == GammaMode::hf) gamma_ = std::max<int64_t>(gamma_, 1);
  if (mode_ != GammaMode::cost) return;
  arms_[0].costs = costs ? std::move(costs) : std::make_shared<CostTable>();
  arms_[0].prior = arms_[0].costs->now().acceptance;
  choose_by_cost(0, false);  // a table that knows the costs decides the first round too
}

GammaController::GammaController(int64_t gamma, int64_t gamma_max, std::vector<std::shared_ptr<CostTable>> tables)
    : GammaController(GammaMode::cost, gamma, gamma_max, tables.empty() ? nullptr : tables[0]) {
  SD_CHECK(!tables.empty(), "the controller needs a cost table per drafter, got none");
  for (size_t i = 1; i < tables.size(); ++i) {
    SD_CHECK(tables[i] != nullptr, "the controller's cost table ", i, " is missing");
    Arm arm;
    arm.costs = tables[i];
    arm.prior = arm.costs->now().acceptance;
    arms_.push_back(arm);
  }
  if (arms_.size() == 1) return;
  arms_[0].n_idle = 0;
  choose_by_cost(0, false);  // again, over every arm
}

double GammaController::alpha_estimate(size_t arm) const {
  const Arm& x = arms_.at(arm);
  return (x.accepted + prior_tokens * x.prior) / (x.judged + prior_tokens);
}

double GammaController::match_rate(const Arm& arm) const {
  return (arm.matched + prior_rounds) / (arm.tried + prior_rounds);
}

bool GammaController::defer_prefill(size_t arm, int64_t window) {
  if (mode_ != GammaMode::cost) return false;
  arms_.at(arm).deferred = arms_.at(arm).paused = true;
  arms_[arm].window = window;
  return true;
}

void GammaController::set_shape(size_t arm, std::function<double(int64_t)> rows, int64_t deepest) {
  arms_.at(arm).rows = std::move(rows);
  arms_[arm].deepest = std::max<int64_t>(1, deepest);
  if (mode_ == GammaMode::cost) choose_by_cost(ranked_lead_, false);
}

double GammaController::rows_of(const Arm& x, int64_t g) {
  if (g <= 0) return 0;
  if (const auto it = x.rows_seen.find(g); it != x.rows_seen.end()) return it->second;
  return x.widen * (x.rows ? x.rows(g) : double(g));
}

double GammaController::catch_up_ms(const Arm& x, const StepCosts& t, int64_t behind) {
  return std::max(0.0, t.draft_prefill_ms_per_token) * double(prefill_fed(behind, x.window));
}

int64_t GammaController::next(int64_t remaining, int64_t behind, int64_t lead) {
  started_ = false;
  if (mode_ != GammaMode::cost) return chosen_ = gamma_;
  if (lead != ranked_lead_) choose_by_cost(lead, false);
  for (const Choice& c : ranked_) {
    Arm& x = arms_[c.arm];
    if (c.gamma == 0) break;
    if (x.deferred) {
      const StepCosts t = x.costs->now();
      // Nothing measured yet (a measured table's first request): draft, so that it gets measured.
      if (!t.verify_ms.empty() && remaining >= 0) {
        const double a = c.probe ? 0.999 : std::min(alpha_estimate(c.arm), 0.999), m = match_rate(x);
        const double saved = double(remaining) * (ms_per_token(t, 0, 0, a, 1.0, lead) -
                                                  ms_per_token(t, c.gamma, rows_of(x, c.gamma), a, m, lead));
        if (saved <= catch_up_ms(x, t, behind)) continue;
      }
      x.deferred = false;  // this round's draft prefills
      started_ = true;
    }
    arm_ = c.arm;
    return chosen_ = c.gamma;
  }
  if (!ranked_.empty() && ranked_[0].gamma > 0) arm_ = ranked_[0].arm;  // passed over for its prefill
  return chosen_ = 0;
}

void GammaController::update(RoundOutcome r) {
  constexpr double decay = 0.95;
  Arm& x = arms_[arm_];
  const int64_t k = r.drafted, a = r.accepted;
  if (k > 0 && x.paused) r.ms_draft = -1;  // a catch-up, not the cost of drafting
  for (Arm& other : arms_) other.paused = other.paused || &other != &x;
  x.paused = k == 0;
  x.judged = x.judged * decay + r.trials();
  x.accepted = x.accepted * decay + (r.judged ? double(a) : 0.0);
  if (chosen_ > 0) {  // chosen to draft: did it propose anything, and how many rows?
    x.tried = x.tried * decay + 1.0;
    x.matched = x.matched * decay + (k > 0 ? 1.0 : 0.0);
    const double rows = double(r.nodes < 0 ? k : r.nodes);
    if (k > 0) {  // (a round without a proposal is the match rate's)
      const auto [seen, fresh] = x.rows_seen.emplace(chosen_, rows);
      if (!fresh) seen->second = 0.8 * seen->second + 0.2 * rows;
      const double shaped = x.rows ? x.rows(chosen_) : double(chosen_);
      if (shaped > 0) x.widen = 0.8 * x.widen + 0.2 * rows / shaped;
    }
  }
  plain_timed_ = plain_timed_ || chosen_ == 0;
  if (mode_ == GammaMode::hf) {
    if (r.judged) gamma_ = (k > 0 && a == k) ? std::min(gamma_ + 2, gamma_max_) : std::max<int64_t>(gamma_ - 1, 1);
  } else if (mode_ == GammaMode::cost) {
    x.costs->measure_round(r);
    for (Arm& other : arms_)  // the target's verify curve, whoever drafted
      if (&other != &x && other.costs != x.costs) other.costs->measure_verify(r.forward_rows(), r.ms_verify);
    choose_by_cost(r.lead, true);  // the next round's lead is unknown yet: next() re-ranks if it differs
  }
}

BatchSeat GammaController::seat(int64_t remaining, int64_t behind) const {
  const Arm& x = arms_[arm_];
  const StepCosts t = x.costs->now();
  BatchSeat s;
  s.cap = chosen_;
  s.a = std::min(alpha_estimate(arm_), 0.999);
  s.m = match_rate(x);
  s.lead = ranked_lead_;
  s.t_draft = std::max(0.0, t.draft_ms_per_token);
  s.prefill_ms = started_ ? catch_up_ms(x, t, behind) : 0.0;
  s.remaining = remaining;
  if (x.rows)
    for (int64_t g = 0; g <= s.cap; ++g) s.rows.push_back(rows_of(x, g));
  return s;
}

void GammaController::settle(int64_t g) {
  SD_CHECK(g >= 0 && g <= std::max<int64_t>(chosen_, 0), "controller: settle(", g, ") after next() chose ", chosen_);
  if (g == 0 && started_) arms_[arm_].deferred = true;
  chosen_ = g;
}

namespace {
// A seat's parts of the step's goodput at each length it may take, g = 0..cap: expected tokens
// (a round without a proposal verifies the lead alone), target rows, draft ms, and the share of
// a deferred draft's catch-up charged to this step. Computed once, so that the searches below
// only add them up.
struct SeatTerms {
  std::vector<double> tokens, rows, draft, prefill;
};
SeatTerms seat_terms(const BatchSeat& s) {
  SD_CHECK(s.cap >= 0, "batch_lengths: a seat's cap must be >= 0, got ", s.cap);
  SeatTerms t;
  for (int64_t g = 0; g <= s.cap; ++g) {
    const double e = g == 0 ? double(s.lead) + 1.0
                            : double(s.lead) + s.m * (1.0 - std::pow(s.a, double(g + 1))) / (1.0 - s.a) + (1.0 - s.m);
    t.tokens.push_back(e);
    t.rows.push_back(double(s.lead) + 1.0 + s.m * (s.rows.empty() ? double(g) : s.rows.at(static_cast<size_t>(g))));
    t.draft.push_back(double(g) * s.t_draft);
    t.prefill.push_back(g > 0 && s.prefill_ms > 0
                            ? s.prefill_ms * (s.remaining > 0 ? std::min(1.0, e / double(s.remaining)) : 1.0)
                            : 0.0);
  }
  return t;
}
// The step's sums at one choice of lengths: tokens per ms of the drafts (shared: the longest),
// the target's forward over all rows, and the catch-ups.
struct StepSums {
  double tokens = 0, rows = 0, draft = 0, prefill = 0;
  double rate(const StepCosts& c) const { return tokens / (draft + c.verify_at(std::llround(rows)) + prefill); }
  // The sums with one seat lengthened from g to g + 1 (a draft term only grows with g).
  StepSums lengthened(const SeatTerms& t, int64_t g) const {
    const auto k = static_cast<size_t>(g);
    return {tokens - t.tokens[k] + t.tokens[k + 1], rows - t.rows[k] + t.rows[k + 1],
            std::max(draft, t.draft[k + 1]), prefill - t.prefill[k] + t.prefill[k + 1]};
  }
};
}  // namespace

std::vector<int64_t> batch_lengths(const std::vector<BatchSeat>& seats, const StepCosts& costs) {
  std::vector<SeatTerms> terms;
  for (const BatchSeat& s : seats) terms.push_back(seat_terms(s));
  const auto sums_at = [&](const std::vector<int64_t>& g) {
    StepSums x;
    for (size_t i = 0; i < seats.size(); ++i) {
      const auto k = static_cast<size_t>(g[i]);
      x.tokens += terms[i].tokens[k], x.rows += terms[i].rows[k], x.prefill += terms[i].prefill[k];
      x.draft = std::max(x.draft, terms[i].draft[k]);
    }
    return x;
  };
  std::vector<int64_t> best(seats.size(), 0), g(seats.size(), 0);
  double best_rate = sums_at(best).rate(costs);
  const auto consider = [&](const std::vector<int64_t>& x, double rate) {
    if (rate > best_rate * (1 + 1e-9)) best = x, best_rate = rate;
  };
  int64_t top = 0;
  for (const BatchSeat& s : seats) top = std::max(top, s.cap);
  for (int64_t k = 1; k <= top; ++k) {  // every seat at min(k, its cap)
    for (size_t i = 0; i < seats.size(); ++i) g[i] = std::min(k, seats[i].cap);
    consider(g, sums_at(g).rate(costs));
  }
  // One draft token at a time to the seat where the step gains most (or loses least), up to every
  // cap; the best point on that path counts too (a knee in the curve makes the gain not monotone).
  // Each candidate changes one seat's terms in the running sums: O(seats) a step, not O(seats^2).
  std::fill(g.begin(), g.end(), 0);
  StepSums now = sums_at(g);
  while (true) {
    size_t pick = seats.size();
    double pick_rate = -1;
    StepSums picked;
    for (size_t i = 0; i < seats.size(); ++i) {
      if (g[i] >= seats[i].cap) continue;
      const StepSums x = now.lengthened(terms[i], g[i]);
      const double rate = x.rate(costs);
      if (rate > pick_rate) pick = i, pick_rate = rate, picked = x;
    }
    if (pick == seats.size()) break;
    ++g[pick];
    now = picked;
    consider(g, pick_rate);
  }
  return best;
}

double GammaController::ms_per_token(const StepCosts& c, int64_t g, double nodes, double a, double m,
                                     int64_t lead) const {
  const double t_draft = std::max(0.0, c.draft_ms_per_token);  // unmeasured: free, so it is tried
  const double expected = (1.0 - std::pow(a, double(g + 1))) / (1.0 - a);
  // A round without a proposal (1 - m) verifies the lead alone. The lead's tokens count as
  // accepted (forced ones are; jump-forward text mostly is).
  const int64_t rows = lead + std::llround(nodes) + 1;
  return (m * (double(g) * t_draft + c.verify_at(rows)) + (1.0 - m) * c.verify_at(lead + 1)) /
         (double(lead) + m * expected + (1.0 - m));
}

void GammaController::choose_by_cost(int64_t lead, bool new_round) {
  struct Best {
    int64_t g = 0;
    double ratio = 1.0;  // ms per token at g over plain decoding's
  };
  ranked_lead_ = lead;
  std::vector<StepCosts> tables;
  for (const Arm& x : arms_) tables.push_back(x.costs->now());
  // Keep the start value until every table has timed a verify step.
  for (const StepCosts& t : tables)
    if (t.verify_ms.empty()) {
      ranked_ = {{arm_, gamma_, false}};
      return;
    }
  // A curve timed only at drafting's row counts gives a plain step its smallest count's time,
  // which makes every draft look free (on a compute-bound CPU 5 rows cost 3.5x one row, and the
  // controller never stepped aside). So before deciding from a measured table without a time
  // at the lead's rows alone, a request takes one plain round, which times them.
  for (size_t i = 0; i < arms_.size() && !plain_timed_; ++i)
    if (!arms_[i].costs->fixed() && tables[i].verify_ms.begin()->first > lead + 1) {
      ranked_ = {{arm_, 0, false}};
      return;
    }
  const auto best_at = [&](size_t i, double a, double m) {
    const double plain = ms_per_token(tables[i], 0, 0, a);
    Best best{0, ms_per_token(tables[i], 0, 0, a, 1.0, lead) / plain};  // the lead alone (none: 1)
    for (int64_t g = 1; g <= std::min(gamma_max_, arms_[i].deepest); ++g) {
      const double ratio = ms_per_token(tables[i], g, rows_of(arms_[i], g), a, m, lead) / plain;
      if (ratio < best.ratio) best = {g, ratio};
    }
    return best;
  };
  std::vector<std::pair<Best, size_t>> bests;
  for (size_t i = 0; i < arms_.size(); ++i)
    bests.push_back({best_at(i, std::min(alpha_estimate(i), 0.999), match_rate(arms_[i])), i});
  std::stable_sort(bests.begin(), bests.end(), [](const auto& x, const auto& y) { return x.first.ratio < y.first.ratio; });
  const Best top = bests[0].first;
  ranked_.clear();
  for (const auto& [b, i] : bests) {
    Arm& x = arms_[i];
    const bool is_best = b.g > 0 && i == bests[0].second;
    if (new_round) x.n_idle = is_best ? 0 : x.n_idle + 1;
    // Passed over for a while, it drafts nothing, so its acceptance (and match rate) is never
    // re-measured: probe now and then, where at best (a = 1, always a match) it beats the choice.
    if (!is_best && x.n_idle > 0 && x.n_idle % probe_every == 0 && best_at(i, 0.999, 1.0).ratio < top.ratio &&
        ranked_.empty())
      ranked_.push_back({i, 1, true});
  }
  for (const auto& [b, i] : bests)
    if (b.g > 0) ranked_.push_back({i, b.g, false});
  ranked_.push_back({bests[0].second, 0, false});
  gamma_ = ranked_[0].gamma;
}

void count_choice(Stats& st, int64_t chosen, int64_t n_emitted) {
  if (static_cast<int64_t>(st.gamma_rounds.size()) <= chosen) st.gamma_rounds.resize(chosen + 1, 0);
  ++st.gamma_rounds[chosen];
  if (chosen == 0) st.n_aside_tokens += n_emitted;
}

}  // namespace specdec::strategies
