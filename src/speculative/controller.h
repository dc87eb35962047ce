#pragma once
// The controller: the draft length of each round (adaptive gamma), from step costs kept for
// the whole process per target/drafter pair, or read from a file (docs/controller.md).
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace specdec::strategies {

struct Stats;

// adaptive_gamma.
enum class GammaMode { off, hf, cost };
// "off" | "hf" | "cost"; anything else is a specdec::Error naming adaptive_gamma and the value.
GammaMode parse_gamma_mode(const std::string& text);

// The step costs of one target/drafter pair, in ms, and the acceptance seen with them: what a
// calibrating run writes and controller_costs reads (docs/controller.md, "The cost table").
struct StepCosts {
  std::string drafter;                   // the (resolved) drafter they were measured with
  std::map<int64_t, double> verify_ms;   // target rows -> ms of a forward over them (measured ones only)
  double draft_ms_per_token = -1;        // < 0: not measured
  double draft_prefill_ms_per_token = -1;  // the draft's prompt forward per prompt token; < 0: not measured
  double acceptance = 0.5;               // the acceptance a request starts from (its prior)

  // A line fitted to verify_ms (one entry: scaled as if each extra row cost 10 % of one row;
  // none: 1 + 0.1 (rows - 1)).
  double verify_at(int64_t rows) const;
  // Reads a table written by write(). A missing or unreadable file, invalid JSON, an unknown or
  // missing key, or a value out of range is a specdec::Error naming the file and the key.
  static StepCosts read(const std::string& path);
  // Writes the table as JSON (through a temporary file, renamed into place).
  void write(const std::string& path) const;
};

// The costs a controller decides from. Measured (the default): every round and draft prefill
// of every request of the process that uses it updates it, so later requests start from what
// earlier ones measured. Fixed (controller_costs): never changes, so decisions made from it
// depend only on accept counts.
class CostTable {
 public:
  CostTable() = default;                       // measured, empty
  explicit CostTable(StepCosts fixed);         // fixed
  // The process's measured table of this target/drafter pair (the models as opaque owners;
  // `draft` may be null), made on first use and kept while the models live.
  static std::shared_ptr<CostTable> of_pair(const std::shared_ptr<const void>& target,
                                            const std::shared_ptr<const void>& draft, const std::string& drafter);
  bool fixed() const { return fixed_; }
  StepCosts now() const;  // a copy
  // A round that drafted k tokens and accepted a: the draft's ms (k > 0; < 0: not a measure of
  // drafting, left out) and the target's ms over k + 1 rows. Ignored by a fixed table.
  void measure_round(int64_t k, int64_t a, double ms_draft, double ms_verify);
  // The draft's prefill of n prompt tokens. Ignored by a fixed table.
  void measure_prefill(int64_t n_tokens, double ms);

 private:
  mutable std::mutex mu_;
  StepCosts costs_;
  double drafted_ = 0, accepted_ = 0;  // decayed counts behind costs_.acceptance
  bool fixed_ = false;
};

// Chooses the draft length of each round.
//  off : always gamma.
//  hf  : Hugging Face's heuristic: gamma + 2 after a fully accepted draft, else gamma - 1
//        (bounded to [1, gamma_max]).
//  cost: picks g in [0, gamma_max] maximising expected tokens per ms,
//        E(g) / (g * t_draft + t_verify(g + 1)), with E(g) = (1 - a^(g+1)) / (1 - a)
//        (Leviathan et al. 2023): t_draft and t_verify from its CostTable, a from this
//        request's accept counts after a prior of the table's acceptance. g = 0 means plain
//        decoding (speculation steps aside); every `probe_every` rounds at 0 it drafts one
//        token to keep measuring a, unless drafting could not pay even at a = 1.
//        Lazy draft prefill (defer_prefill): while the draft has not prefilled, a round drafts
//        only if the time it is expected to save over the tokens left repays the draft's
//        catch-up, draft_prefill_ms_per_token per committed token; else it steps aside.
class GammaController {
 public:
  // costs: the table cost mode decides from (null: a measured table of its own).
  GammaController(GammaMode mode, int64_t gamma, int64_t gamma_max, std::shared_ptr<CostTable> costs = nullptr);
  // The draft model's prefill waits for the first round that drafts (its drafter catches up
  // then): true in cost mode, which then charges that catch-up to the first decision to draft;
  // false otherwise (off, hf: the caller prefills as before).
  bool defer_prefill();
  // The next round's draft length. remaining: the tokens the request may still emit (< 0:
  // unbounded); behind: the tokens a deferred draft would catch up (the committed sequence).
  // Both matter only while the prefill is deferred; the first length > 0 returned ends that.
  int64_t next(int64_t remaining = -1, int64_t behind = 0);
  // One round: drafted k, accepted a, draft time (ms) and target verify time (ms, k+1 rows).
  // A round that drafted after a pause at 0 (or a deferred prefill) caught its draft up on
  // every token emitted meanwhile: its draft time is not taken as the cost of drafting.
  void update(int64_t k, int64_t a, double ms_draft, double ms_verify);
  double alpha_estimate() const;

 private:
  void choose_by_cost();
  // Expected ms per emitted token at draft length g and acceptance a (g = 0: plain decoding).
  double ms_per_token(const StepCosts& c, int64_t g, double a) const;

  GammaMode mode_;
  int64_t gamma_, gamma_max_;
  std::shared_ptr<CostTable> costs_;  // cost mode only
  int64_t n_zero_rounds_ = 0;
  bool probing_ = false;   // gamma_ is a probe's 1, not the best length
  bool deferred_ = false;  // the draft has not prefilled yet (defer_prefill)
  bool paused_ = false;    // the last round drafted nothing: the next draft catches up first
  double drafted_ = 0, accepted_ = 0;  // this request's, exponentially decayed
  double prior_ = 0.5;                 // the table's acceptance when the request started
  static constexpr int64_t probe_every = 8;
  static constexpr double prior_tokens = 4;  // the prior's weight, in drafted tokens
};

// The round's decision in the stats: rounds by chosen draft length (Stats::gamma_rounds; 0 =
// stepped aside) and the tokens emitted in rounds at 0.
void count_choice(Stats& st, int64_t chosen, int64_t n_emitted);

}  // namespace specdec::strategies
