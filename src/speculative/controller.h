#pragma once
// The controller: the draft length of each round (adaptive gamma).
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::strategies {

// Chooses the draft length of each round.
//  off : always gamma.
//  hf  : Hugging Face's heuristic: gamma + 2 after a fully accepted draft, else gamma - 1
//        (bounded to [1, gamma_max]).
//  cost: picks g in [0, gamma_max] maximising expected tokens per unit time,
//        E(g) / (g * t_draft + t_verify(g + 1)), with E(g) = (1 - a^(g+1)) / (1 - a) from the
//        measured acceptance a (Leviathan et al. 2023) and measured draft/verify times.
//        g = 0 means plain decoding; every `probe_every` rounds at 0 it drafts one token to
//        keep measuring a.
class GammaController {
 public:
  GammaController(const std::string& mode, int64_t gamma, int64_t gamma_max);
  int64_t next() const { return gamma_; }
  // One round: drafted k, accepted a, draft time (ms) and target verify time (ms, k+1 rows).
  void update(int64_t k, int64_t a, double ms_draft, double ms_verify);
  double alpha_estimate() const;
  // Predicted verify time (ms) for a forward of `rows` target rows (cost mode).
  double verify_ms(int64_t rows) const;

 private:
  void choose_by_cost();

  std::string mode_;
  int64_t gamma_, gamma_max_;
  int64_t n_rounds_ = 0, n_zero_rounds_ = 0;
  double drafted_ = 0, accepted_ = 0;              // exponentially decayed counts
  double ms_draft_per_token_ = -1;                  // EMA; < 0 = unknown
  std::vector<double> ms_verify_by_rows_;           // EMA per row count; < 0 = unknown
  static constexpr int64_t probe_every = 8;
};

}  // namespace specdec::strategies
