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

// Linear model t(rows) = t1 + slope * (rows - 1) fitted to the measured rows; before two
// entries exist, assume each extra row costs 10% of a 1-row step (CPU notes: 5 rows ~ 1.5x).
double StepCosts::verify_at(int64_t rows) const {
  if (verify_ms.empty()) return 1.0 + 0.1 * double(rows - 1);
  if (verify_ms.size() == 1) {
    const auto& [r, ms] = *verify_ms.begin();
    return ms * (1.0 + 0.1 * double(rows - 1)) / (1.0 + 0.1 * double(r - 1));
  }
  double mx = 0, my = 0;
  for (const auto& [x, y] : verify_ms) { mx += double(x); my += y; }
  mx /= double(verify_ms.size());
  my /= double(verify_ms.size());
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : verify_ms) { sxy += (double(x) - mx) * (y - my); sxx += (double(x) - mx) * (double(x) - mx); }
  const double slope = std::max(0.0, sxy / sxx);
  return std::max(1e-6, my + slope * (double(rows) - mx));
}

StepCosts StepCosts::read(const std::string& path) {
  const auto where = [&](const std::string& key) { return "controller_costs " + path + ": key '" + key + "'"; };
  nlohmann::json j;
  try {
    j = io::read_json_file(path);
  } catch (const Error& e) {
    fail("controller_costs: ", e.what());
  }
  SD_CHECK(j.is_object(), "controller_costs ", path, ": expected a JSON object (a cost table a calibrating run wrote)");
  for (const auto& [key, value] : j.items()) {
    (void)value;
    SD_CHECK(key == "drafter" || key == "verify_ms" || key == "draft_ms_per_token" ||
                 key == "draft_prefill_ms_per_token" || key == "acceptance",
             where(key), " is unknown (known: drafter, verify_ms, draft_ms_per_token, draft_prefill_ms_per_token, "
             "acceptance)");
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
  for (const auto& [rows, ms] : j.at("verify_ms").items()) {
    size_t used = 0;
    long long r = 0;
    try {
      r = std::stoll(rows, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SD_CHECK(used == rows.size() && r >= 1 && r <= 257, where("verify_ms." + rows),
             ": the rows must be an integer in [1, 257]");
    SD_CHECK(ms.is_number() && std::isfinite(ms.get<double>()) && ms.get<double>() > 0, where("verify_ms." + rows),
             " = ", ms.dump(), ": must be a number of ms > 0");
    c.verify_ms[r] = ms.get<double>();
  }
  c.draft_ms_per_token = number("draft_ms_per_token", 0, 1e9, true);
  c.draft_prefill_ms_per_token = number("draft_prefill_ms_per_token", 0, 1e9, false);
  c.acceptance = number("acceptance", 0, 1, true);
  return c;
}

void StepCosts::write(const std::string& path) const {
  nlohmann::json verify = nlohmann::json::object();
  for (const auto& [rows, ms] : verify_ms) verify[std::to_string(rows)] = ms;
  nlohmann::json j = {{"drafter", drafter}, {"verify_ms", verify}, {"acceptance", acceptance}};
  // Only what was measured: a run that never drafted has no draft cost to give.
  if (draft_ms_per_token >= 0) j["draft_ms_per_token"] = draft_ms_per_token;
  if (draft_prefill_ms_per_token >= 0) j["draft_prefill_ms_per_token"] = draft_prefill_ms_per_token;
  try {
    io::write_atomic(path, j.dump(2) + "\n");
  } catch (const Error& e) {
    fail("controller_calibrate: ", e.what());
  }
}

CostTable::CostTable(StepCosts fixed) : costs_(std::move(fixed)), fixed_(true) {}

std::shared_ptr<CostTable> CostTable::of_pair(const std::shared_ptr<const void>& target,
                                              const std::shared_ptr<const void>& draft, const std::string& drafter) {
  struct Entry {
    std::weak_ptr<const void> target, draft;
    std::shared_ptr<CostTable> table;
  };
  static std::mutex mu;
  static std::map<std::tuple<const void*, const void*, std::string>, Entry> tables;
  std::lock_guard<std::mutex> lock(mu);
  Entry& e = tables[{target.get(), draft.get(), drafter}];
  // A table outlives nothing it measured: models freed since (an address reused) start afresh.
  if (!e.table || e.target.lock() != target || e.draft.lock() != draft) {
    e = {target, draft, std::make_shared<CostTable>()};
    e.table->costs_.drafter = drafter;
  }
  return e.table;
}

StepCosts CostTable::now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return costs_;
}

namespace {
// An exponential moving average of measured ms; slot < 0: nothing measured yet.
void blend(double& slot, double x) {
  constexpr double ema = 0.2;
  slot = slot < 0 ? x : (1 - ema) * slot + ema * x;
}
}  // namespace

void CostTable::measure_round(int64_t k, int64_t a, double ms_draft, double ms_verify) {
  if (fixed_) return;
  constexpr double decay = 0.99;
  std::lock_guard<std::mutex> lock(mu_);
  drafted_ = drafted_ * decay + double(k);
  accepted_ = accepted_ * decay + double(a);
  costs_.acceptance = (accepted_ + 1.0) / (drafted_ + 2.0);
  if (k > 0 && ms_draft >= 0) blend(costs_.draft_ms_per_token, ms_draft / double(k));
  auto it = costs_.verify_ms.emplace(k + 1, -1.0).first;
  blend(it->second, ms_verify);
}

void CostTable::measure_prefill(int64_t n_tokens, double ms) {
  if (fixed_ || n_tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  blend(costs_.draft_prefill_ms_per_token, ms / double(n_tokens));
}

// ---- the controller ---------------------------------------------------------------------------

GammaController::GammaController(GammaMode mode, int64_t gamma, int64_t gamma_max, std::shared_ptr<CostTable> costs)
    : mode_(mode), gamma_(gamma), gamma_max_(gamma_max), costs_(std::move(costs)) {
  SD_CHECK(gamma >= 0 && gamma <= gamma_max, "gamma (", gamma, ") must be in [0, gamma_max = ", gamma_max, "]");
  if (mode_ == GammaMode::hf) gamma_ = std::max<int64_t>(gamma_, 1);
  if (mode_ != GammaMode::cost) return;
  if (!costs_) costs_ = std::make_shared<CostTable>();
  prior_ = costs_->now().acceptance;
  choose_by_cost();  // a table that knows the costs decides the first round too
}

double GammaController::alpha_estimate() const {
  return (accepted_ + prior_tokens * prior_) / (drafted_ + prior_tokens);
}

bool GammaController::defer_prefill() {
  if (mode_ != GammaMode::cost) return false;
  deferred_ = paused_ = true;
  return true;
}

int64_t GammaController::next(int64_t remaining, int64_t behind) {
  if (!deferred_ || gamma_ == 0) return gamma_;
  const StepCosts c = costs_->now();
  // Nothing measured yet (a measured table's first request): draft, so that it gets measured.
  if (!c.verify_ms.empty() && remaining >= 0) {
    const double a = probing_ ? 0.999 : std::min(alpha_estimate(), 0.999);
    const double saved = double(remaining) * (ms_per_token(c, 0, a) - ms_per_token(c, gamma_, a));
    if (saved <= std::max(0.0, c.draft_prefill_ms_per_token) * double(behind)) return 0;
  }
  deferred_ = false;  // this round's draft prefills
  return gamma_;
}

void GammaController::update(int64_t k, int64_t a, double ms_draft, double ms_verify) {
  constexpr double decay = 0.95;
  if (k > 0 && paused_) ms_draft = -1;  // a catch-up, not the cost of drafting
  paused_ = k == 0;
  drafted_ = drafted_ * decay + double(k);
  accepted_ = accepted_ * decay + double(a);
  if (mode_ == GammaMode::hf) {
    gamma_ = (k > 0 && a == k) ? std::min(gamma_ + 2, gamma_max_) : std::max<int64_t>(gamma_ - 1, 1);
  } else if (mode_ == GammaMode::cost) {
    costs_->measure_round(k, a, ms_draft, ms_verify);
    choose_by_cost();
  }
}

double GammaController::ms_per_token(const StepCosts& c, int64_t g, double a) const {
  const double t_draft = std::max(0.0, c.draft_ms_per_token);  // unmeasured: free, so it is tried
  const double expected = (1.0 - std::pow(a, double(g + 1))) / (1.0 - a);
  return (double(g) * t_draft + c.verify_at(g + 1)) / expected;
}

void GammaController::choose_by_cost() {
  const StepCosts c = costs_->now();
  if (c.verify_ms.empty()) return;  // keep the start value until a verify step has been measured
  const auto best_at = [&](double a) {
    int64_t best = 0;
    double best_ms = ms_per_token(c, 0, a);
    for (int64_t g = 1; g <= gamma_max_; ++g) {
      const double ms = ms_per_token(c, g, a);
      if (ms < best_ms) { best_ms = ms; best = g; }
    }
    return best;
  };
  const int64_t best = best_at(std::min(alpha_estimate(), 0.999));
  n_zero_rounds_ = best == 0 ? n_zero_rounds_ + 1 : 0;
  // At gamma 0 nothing is drafted, so acceptance is never re-measured: probe now and then,
  // where a higher acceptance could make drafting pay.
  probing_ = best == 0 && n_zero_rounds_ % probe_every == 0 && best_at(0.999) > 0;
  gamma_ = probing_ ? 1 : best;
}

void count_choice(Stats& st, int64_t chosen, int64_t n_emitted) {
  if (static_cast<int64_t>(st.gamma_rounds.size()) <= chosen) st.gamma_rounds.resize(chosen + 1, 0);
  ++st.gamma_rounds[chosen];
  if (chosen == 0) st.n_aside_tokens += n_emitted;
}

}  // namespace specdec::strategies
