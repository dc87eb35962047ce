// The controller (controller.h): draft-length control.
#include "speculative/controller.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace specdec::strategies {

// adaptive_gamma=cost is NOT reproducible from the seed when temperature > 0. It picks gamma
// from measured wall-clock draft/verify times, and gamma decides which positions are drafted
// (a draft sample, then accept/reject against the target, then a residual sample) and which
// are plain bonus samples of the target, and how many uniforms each round takes from the RNG.
// The law of the output is the target's for every gamma, but the tokens drawn for a given seed
// are not: a different timing is a different coupling. No reseeding fixes this honestly, since
// a drafted position and a bonus position turn the same uniforms into different tokens.
// Greedy runs (temperature 0) emit the target's argmax whatever gamma is, so they stay
// reproducible up to the rounding of batched verification forwards. off and hf depend only
// on accept counts and are reproducible.
constexpr const char* k_cost_not_reproducible =
    "adaptive_gamma=cost chooses gamma from wall-clock timings: with temperature > 0 the sampled "
    "tokens are not reproducible from the seed (greedy runs are; use off or hf to reproduce)";

GammaController::GammaController(const std::string& mode, int64_t gamma, int64_t gamma_max)
    : mode_(mode), gamma_(gamma), gamma_max_(gamma_max), ms_verify_by_rows_(gamma_max + 2, -1.0) {
  SD_CHECK(mode == "off" || mode == "hf" || mode == "cost", "adaptive_gamma must be off, hf or cost, got '",
           mode, "'");
  SD_CHECK(gamma >= 0 && gamma <= gamma_max, "gamma (", gamma, ") must be in [0, gamma_max = ", gamma_max, "]");
  if (mode_ == "hf") gamma_ = std::max<int64_t>(gamma_, 1);
  // Said once per process, where every run's log shows it.
  if (mode_ == "cost") {
    static const bool warned = (log::warn(k_cost_not_reproducible), true);
    (void)warned;
  }
}

double GammaController::alpha_estimate() const {
  return (accepted_ + 1.0) / (drafted_ + 2.0);  // Laplace prior: 1/2 before any evidence
}

void GammaController::update(int64_t k, int64_t a, double ms_draft, double ms_verify) {
  ++n_rounds_;
  constexpr double decay = 0.95, ema = 0.2;
  drafted_ = drafted_ * decay + double(k);
  accepted_ = accepted_ * decay + double(a);
  if (k > 0) {
    const double per_token = ms_draft / double(k);
    ms_draft_per_token_ = ms_draft_per_token_ < 0 ? per_token : (1 - ema) * ms_draft_per_token_ + ema * per_token;
  }
  if (k + 1 < static_cast<int64_t>(ms_verify_by_rows_.size())) {
    double& slot = ms_verify_by_rows_[k + 1];
    slot = slot < 0 ? ms_verify : (1 - ema) * slot + ema * ms_verify;
  }
  if (mode_ == "hf") {
    gamma_ = (k > 0 && a == k) ? std::min(gamma_ + 2, gamma_max_) : std::max<int64_t>(gamma_ - 1, 1);
  } else if (mode_ == "cost") {
    choose_by_cost();
  }
}

// Linear model t(rows) = t1 + slope * (rows - 1) fitted to the measured buckets; before two
// buckets exist, assume each extra row costs 10% of a 1-row step (CPU notes: 5 rows ~ 1.5x).
double GammaController::verify_ms(int64_t rows) const {
  std::vector<std::pair<double, double>> pts;
  for (size_t r = 1; r < ms_verify_by_rows_.size(); ++r)
    if (ms_verify_by_rows_[r] >= 0) pts.emplace_back(double(r), ms_verify_by_rows_[r]);
  if (pts.empty()) return 1.0 + 0.1 * double(rows - 1);
  if (pts.size() == 1) return pts[0].second * (1.0 + 0.1 * double(rows - 1)) / (1.0 + 0.1 * (pts[0].first - 1));
  double mx = 0, my = 0;
  for (auto& [x, y] : pts) { mx += x; my += y; }
  mx /= double(pts.size());
  my /= double(pts.size());
  double sxy = 0, sxx = 0;
  for (auto& [x, y] : pts) { sxy += (x - mx) * (y - my); sxx += (x - mx) * (x - mx); }
  const double slope = std::max(0.0, sxy / sxx);
  return std::max(1e-6, my + slope * (double(rows) - mx));
}

void GammaController::choose_by_cost() {
  if (n_rounds_ < 2) return;  // keep the start value until both costs have been measured once
  const double a = std::min(alpha_estimate(), 0.999);
  const double t_draft = std::max(0.0, ms_draft_per_token_);
  int64_t best = 0;
  double best_rate = 1.0 / verify_ms(1);
  for (int64_t g = 1; g <= gamma_max_; ++g) {
    const double expected = (1.0 - std::pow(a, double(g + 1))) / (1.0 - a);
    const double rate = expected / (double(g) * t_draft + verify_ms(g + 1));
    if (rate > best_rate) { best_rate = rate; best = g; }
  }
  n_zero_rounds_ = best == 0 ? n_zero_rounds_ + 1 : 0;
  // At gamma 0 nothing is drafted, so acceptance is never re-measured: probe now and then.
  gamma_ = (best == 0 && n_zero_rounds_ % probe_every == 0) ? 1 : best;
}

}  // namespace specdec::strategies
