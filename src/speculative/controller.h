#pragma once
// The controller: the draft length of each round (adaptive gamma), from step costs kept for
// the whole process per target/drafter pair and configuration, or read from a file
// (docs/controller.md).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace specdec::strategies {

struct Stats;

// One round as the controller learns from it. Acceptance is Leviathan et al.'s per-token
// chance a: a drafted token is judged only if every token before it was accepted, so a round
// that accepted `accepted` of `drafted` judged accepted + (accepted < drafted) tokens, and the
// estimate is accepted / judged (not accepted / drafted, which counts the tokens after the first
// rejection as failures and so reads a lower a than the rounds had: a chain of 4 that yields 4
// tokens a round has accepted / drafted 0.76 and a 0.88).
struct RoundOutcome {
  int64_t drafted = 0;     // the drafter's tokens (after the grammar's lead)
  int64_t accepted = 0;    // of them
  double ms_draft = 0;     // the draft's time (< 0: not a measure of drafting)
  double ms_verify = 0;    // the target's forward over rows()
  int64_t lead = 0;        // tokens verified before the drafter's: the grammar's forced and jump tokens
  bool judged = true;      // false: the target rejected a lead token, so the drafter's went unjudged
  int64_t batch_rows = 0;  // the forward's rows over the whole batch (0: rows(), a batch of one;
                           // < 0: no verify time to file: the forward fed a newcomer's prompt too,
                           // or another sequence's round of the same batch step files it)
  int64_t nodes = -1;      // the drafter's rows verified: a tree's nodes (< 0: drafted, a chain)
  int64_t rows() const { return lead + (nodes < 0 ? drafted : nodes) + 1; }
  // The row count the verify curve files ms_verify under (< 0: none).
  int64_t forward_rows() const { return batch_rows == 0 ? rows() : batch_rows; }
  double trials() const { return judged && drafted > 0 ? double(accepted + (accepted < drafted ? 1 : 0)) : 0.0; }
};

// The tokens a draft's catch-up feeds when it is `behind` tokens behind and reads at most
// `window` of them (Drafter::prefill_window; 0: all).
inline int64_t prefill_fed(int64_t behind, int64_t window) { return window > 0 ? std::min(behind, window) : behind; }

// adaptive_gamma.
enum class GammaMode { off, hf, cost };
// "off" | "hf" | "cost"; anything else is a specdec::Error naming adaptive_gamma and the value.
GammaMode parse_gamma_mode(const std::string& text);

// The step costs of one target/drafter pair, in ms, and the acceptance seen with them: what a
// calibrating run writes and controller_costs reads (docs/controller.md, "The cost table").
struct StepCosts {
  std::string drafter;                   // the (resolved) drafter they were measured with
  std::map<int64_t, double> verify_ms;   // target rows -> ms of a forward over them (measured ones only)
  std::map<int64_t, int64_t> verify_rounds;  // target rows -> the forwards behind verify_ms (as read: maybe none)
  double draft_ms_per_token = -1;        // < 0: not measured
  int64_t draft_rounds = 0;              // the draft steps behind draft_ms_per_token
  double draft_prefill_ms_per_token = -1;  // the draft's prompt forward per prompt token; < 0: not measured
  double acceptance = 0.5;               // the acceptance a request starts from (its prior)

  // verify_ms interpolated between the measured row counts (below them the smallest's, beyond
  // them the last two's slope; one entry: scaled as if each extra row cost 10 % of one row;
  // none: 1 + 0.1 (rows - 1)).
  double verify_at(int64_t rows) const;
  // Reads a table written by write(). A missing or unreadable file, invalid JSON, an unknown or
  // missing key, or a value out of range is a specdec::Error naming the file and the key. A
  // file of several tables (a list) is an error here: read_all reads those.
  static StepCosts read(const std::string& path);
  // Reads one table (a JSON object) or one per drafter (a list of them, each drafter named
  // once), as write_all writes them; errors as read(), naming the entry ([i]) in a list.
  static std::vector<StepCosts> read_all(const std::string& path);
  // Writes the table as JSON (through a temporary file, renamed into place).
  void write(const std::string& path) const;
  // Writes one table as an object (write), several as a list of them.
  static void write_all(const std::vector<StepCosts>& tables, const std::string& path);
};

// One sequence of a batch step as the batch-wide decision sees it (batch_lengths).
struct BatchSeat {
  int64_t cap = 0;         // the length its own controller chose: the most it drafts this step
  double a = 0.5, m = 1;   // its drafter's acceptance and match rate (GammaController)
  int64_t lead = 0;        // the grammar's lead it verifies first
  double t_draft = 0;      // its drafter's ms per drafted token (a batched draft step)
  double prefill_ms = 0;   // a deferred draft's catch-up if it drafts now (0: none)
  int64_t remaining = -1;  // tokens it may still emit (< 0: unbounded)
  std::vector<double> rows;  // the rows its draft adds at length g, g = 0..cap (empty: g, a chain)
};

// The batch step's draft lengths (adaptive_gamma=cost in a batch; docs/controller.md,
// "Batches"): each seat's length in [0, cap], chosen to maximise the step's expected tokens per
// ms, sum of E_i / (max_i g_i t_draft_i + T(sum of rows) + prefills), as SmartSpec's goodput
// (Liu et al. 2024): T is the target's forward over all the batch's rows (the verify curve,
// measured over whole batch forwards), so a draft row is weighed by what it costs every
// sequence's step, and the drafts share their draft forwards. A deferred draft's catch-up is
// charged to this step by the share of its remaining tokens the step is expected to emit. The
// best of the uniform lengths (all seats at min(k, cap)) and of the path that adds one draft
// token at a time where the step gains most.
std::vector<int64_t> batch_lengths(const std::vector<BatchSeat>& seats, const StepCosts& costs);

// The costs a controller decides from. Measured (the default): every round and draft prefill
// of every request of the process that uses it updates it, so later requests start from what
// earlier ones measured. Fixed (controller_costs): never changes, so decisions made from it
// depend only on accept counts.
class CostTable {
 public:
  CostTable() = default;                       // measured, empty
  explicit CostTable(StepCosts fixed);         // fixed
  // The process's measured table of this target/drafter pair (the models as opaque owners;
  // `draft` may be null) under this configuration (`config`: the strategy's resolved parameters,
  // so that cells of one run that differ in any of them, a temperature, a tree's shape, never
  // decide from each other's draft costs and acceptance), made on first use and kept while the
  // models live. A new table starts from the fullest verify curve of the same target measured
  // so far (the target's forwards cost what they cost whoever drafted).
  static std::shared_ptr<CostTable> of_pair(const std::shared_ptr<const void>& target,
                                            const std::shared_ptr<const void>& draft, const std::string& drafter,
                                            const std::string& config = "");
  bool fixed() const { return fixed_; }
  StepCosts now() const;  // a copy
  // A round its drafter drafted (or a round at 0): the draft's ms per token (drafted > 0 and
  // ms_draft >= 0), the target's ms over its rows, the acceptance. Ignored by a fixed table.
  void measure_round(const RoundOutcome& r);
  // The target's ms over `rows` rows in a round another drafter drafted (or none): the verify
  // curve only. Ignored by a fixed table.
  void measure_verify(int64_t rows, double ms);
  // The draft's prefill of n prompt tokens. Ignored by a fixed table.
  void measure_prefill(int64_t n_tokens, double ms);
  // A finished request's output length. Ignored by a fixed table.
  void measure_length(int64_t n_tokens);
  // The tokens a request that has emitted n may still emit, at most `bound` (its max_new_tokens
  // left): the mean, over the last 256 finished requests that emitted more than n, of what they
  // emitted beyond n; `bound` while fewer than 4 did (and always for a fixed table). A lazily
  // prefilled draft is weighed against it: a request of short answers (a JSON object ends the
  // generation long before max_new_tokens) then does not start its draft for tokens it will
  // never emit.
  int64_t expected_left(int64_t n, int64_t bound) const;

 private:
  void file_verify(int64_t rows, double ms);  // one forward's ms into the verify curve (mu_ held)

  mutable std::mutex mu_;
  StepCosts costs_;
  double judged_ = 0, accepted_ = 0;  // decayed counts behind costs_.acceptance (RoundOutcome)
  int64_t prefills_ = 0;               // the draft prefills behind costs_.draft_prefill_ms_per_token
  std::vector<int64_t> lengths_;       // the last finished requests' output lengths (measure_length)
  bool fixed_ = false;
};

// Chooses each round's draft length and, with several drafters, which one drafts.
//  off : always gamma.
//  hf  : Hugging Face's heuristic: gamma + 2 after a fully accepted draft, else gamma - 1
//        (bounded to [1, gamma_max]).
//  cost: picks g in [0, gamma_max] maximising expected tokens per ms,
//        E(g) / (g * t_draft + t_verify(g + 1)), with E(g) = (1 - a^(g+1)) / (1 - a)
//        (Leviathan et al. 2023): t_draft and t_verify from its CostTable, a from this
//        request's accept counts after a prior of the table's acceptance. g = 0 means plain
//        decoding (speculation steps aside); every `probe_every` rounds at 0 it drafts one
//        token to keep measuring a, unless drafting could not pay even at a = 1. A measured
//        table that has timed no step as small as a plain one (lead + 1 rows) gets one plain
//        round first, so that t_verify(1) is measured, not read off the drafts' row counts.
//        Several drafters (speculative's `drafters`): one arm each, with its own table, accept
//        counts and match rate m (the share of its rounds that proposed anything: a lookup may
//        find nothing; a round without a proposal costs and emits what plain decoding does).
//        Each round the arm and g with the lowest expected ms per token relative to plain
//        decoding's (by its own table) draft; an arm passed over for `probe_every` rounds in a
//        row drafts a 1-token probe where it could beat the choice at a = 1.
//        A tree drafter's round of depth g verifies more rows than g, weighed at their verify
//        cost: the moving average of the rows its rounds at g proposed, or where it has not
//        drafted at g, the drafter's shape (set_shape: Drafter::rows_at) times the ratio of
//        measured to shaped rows over its rounds. No arm drafts deeper than its drafter ever
//        does (Drafter::deepest).
//        Lazy draft prefill (defer_prefill): while an arm's draft has not prefilled, it drafts
//        only if the time it is expected to save over the tokens left repays the draft's
//        catch-up, draft_prefill_ms_per_token per committed token; else the next best choice
//        (at last, stepping aside) stands.
class GammaController {
 public:
  // costs: the table cost mode decides from (null: a measured table of its own).
  GammaController(GammaMode mode, int64_t gamma, int64_t gamma_max, std::shared_ptr<CostTable> costs = nullptr);
  // Cost mode with one arm per table (drafter i: tables[i]; at least one, none null).
  GammaController(int64_t gamma, int64_t gamma_max, std::vector<std::shared_ptr<CostTable>> tables);
  // Arm `arm`'s draft model's prefill waits for the first round that arm drafts (its drafter
  // catches up then): true in cost mode, which then charges that catch-up to the first decision
  // to draft with it; false otherwise (off, hf: the caller prefills as before). window: the most
  // tokens that catch-up feeds however far behind (a draft that reads a window of the prompt,
  // Drafter::prefill_window); 0: all of them.
  bool defer_prefill(size_t arm = 0, int64_t window = 0);
  // Arm `arm`'s draft of depth g verifies rows(g) draft rows (a tree's nodes by its shape;
  // Drafter::rows_at), not g, until its rounds at g are measured, and is never deeper than
  // `deepest` (Drafter::deepest). Cost mode weighs every length by them from the next ranking on.
  void set_shape(size_t arm, std::function<double(int64_t)> rows, int64_t deepest);
  // The next round's draft length, and its arm (drafter()). remaining: the tokens the request
  // may still emit (< 0: unbounded); behind: the tokens a deferred draft would catch up (the
  // committed sequence). Both matter only while a prefill is deferred; an arm's first length
  // > 0 returned ends its deferral. lead: the tokens the round drafts before the drafter's
  // (structured output's forced and jump-forward tokens): cost mode weighs every choice, 0
  // included, with them verified first (taken as accepted), so a round whose lead already
  // makes it cheap per token drafts only where the drafter adds to that.
  int64_t next(int64_t remaining = -1, int64_t behind = 0, int64_t lead = 0);
  // The arm the last next() chose (0 before any; kept through a round that stepped aside).
  size_t drafter() const { return arm_; }
  // One round of the last next()'s arm. A round that drafted after a pause (a round at 0,
  // another arm's round, or a deferred prefill) caught its draft up on every token emitted
  // meanwhile: its draft time is not taken as the cost of drafting.
  void update(RoundOutcome r);
  double alpha_estimate(size_t arm = 0) const;
  // The last next()'s choice as the batch-wide decision needs it (cost mode). behind: as next().
  BatchSeat seat(int64_t remaining, int64_t behind) const;
  // The batch-wide decision drafts g (<= the last next()'s length) this round: a draft whose
  // prefill that next() started, cut to 0, stays deferred.
  void settle(int64_t g);

 private:
  struct Arm {
    std::shared_ptr<CostTable> costs;
    double judged = 0, accepted = 0;   // this request's tokens judged and accepted, exponentially decayed
    double tried = 0, matched = 0;     // rounds it was chosen to draft, and of them proposed (decayed)
    double prior = 0.5;                // the table's acceptance when the request started
    int64_t n_idle = 0;                // rounds in a row it was not the best choice
    bool deferred = false;             // its draft has not prefilled yet (defer_prefill)
    int64_t window = 0;                // the most tokens its deferred prefill feeds (0: all)
    std::function<double(int64_t)> rows;  // the draft rows at depth g by its shape (set_shape; empty: g)
    std::map<int64_t, double> rows_seen;  // g -> moving average of the rows its rounds at g proposed
    double widen = 1;                     // moving average of the rows its rounds proposed / their shape's
    int64_t deepest = std::numeric_limits<int64_t>::max();  // its drafter's deepest draft (set_shape)
    bool paused = false;               // it did not draft last round: its next draft catches up first
  };
  struct Choice {
    size_t arm = 0;
    int64_t gamma = 0;
    bool probe = false;  // a 1-token probe, not the best length
  };
  // Ranks the choices for a round after `lead` tokens; new_round: a round has passed since the
  // last ranking (the arms' idle counts move).
  void choose_by_cost(int64_t lead, bool new_round);
  double match_rate(const Arm& arm) const;
  // What arm x's deferred draft would spend catching up on `behind` tokens.
  static double catch_up_ms(const Arm& x, const StepCosts& t, int64_t behind);
  // Arm x's draft rows at depth g: as measured at g, else its shape's, widened as measured.
  static double rows_of(const Arm& x, int64_t g);
  // Expected ms per emitted token at draft length g (its draft verifying `nodes` rows) after
  // `lead` tokens, acceptance a and match rate m (g = 0, lead = 0: plain decoding).
  double ms_per_token(const StepCosts& c, int64_t g, double nodes, double a, double m = 1.0, int64_t lead = 0) const;

  GammaMode mode_;
  int64_t gamma_, gamma_max_;
  std::vector<Arm> arms_;       // cost mode: one per drafter; else one, without a table
  std::vector<Choice> ranked_;  // cost mode: this round's choices, best first (deferral may skip some)
  size_t arm_ = 0;              // the arm of the last next()
  int64_t chosen_ = -1;         // the length the last next() returned (-1: none yet)
  int64_t ranked_lead_ = 0;     // the lead ranked_ was ranked for
  bool started_ = false;        // the last next() ended its arm's deferral
  bool plain_timed_ = false;    // a round of this request stepped aside (timed a plain step)
  static constexpr int64_t probe_every = 8;
  static constexpr double prior_tokens = 4;  // the acceptance prior's weight, in judged tokens
  static constexpr double prior_rounds = 2;  // the match rate's prior (1)'s weight, in rounds
};

// The round's decision in the stats: rounds by chosen draft length (Stats::gamma_rounds; 0 =
// stepped aside) and the tokens emitted in rounds at 0.
void count_choice(Stats& st, int64_t chosen, int64_t n_emitted);

}  // namespace specdec::strategies
