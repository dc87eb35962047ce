#pragma once
// Drafters (proposers) for speculative decoding. A drafter sees the committed sequence
// (prompt + generated) and returns a plain DraftProposal: a chain or a token tree. It never
// sees the target or the verifier (DESIGN principle 2).
//
// Drafters are registered like strategies: each file in src/speculative/drafters/ defines
// `DrafterInfo <name>_drafter_info()`, and one line in drafters/registry.cpp lists it.
// Their parameters join the speculative strategy's schema (speculative_info()), so
// `--param tree_branching=4,2` reaches the drafter that reads it.
#include <ATen/ATen.h>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/causal_lm.h"
#include "sampling/processors.h"
#include "strategies/phases.h"
#include "strategies/param_table.h"
#include "strategies/strategy.h"

namespace specdec::tokenizer { class Tokenizer; }
namespace specdec::sampling { class ConstraintState; }

namespace specdec::strategies {

class CostTable;

// The most draft tokens (chain length or tree nodes) one round may propose; KV caches keep this
// many positions of slack beyond the request. Tree drafters check their size against it.
constexpr int64_t k_max_draft_nodes = 256;

// Ids [N] int64 left on the device that made them, and their host copy, queued
// (model::to_host_async) for a later read that waits for the device anyway to bring in.
struct DeviceTokens {
  at::Tensor device, host;
  bool defined() const { return device.defined(); }
  int64_t size() const { return device.size(0); }
  // Holds `ids` where they are and queues their host copy.
  void hold(const at::Tensor& ids);
  // The ids on device `to`: a copy without a wait, or a read of its own when the host wants them.
  at::Tensor on(const at::Device& to) const;
  // The ids on the host, leaving this empty. synced: a read has waited for the device since the
  // copy was queued (the verdict), so the copy is there; false: a read of its own.
  at::Tensor read(bool synced);
};

// N draft tokens: a chain x_1..x_N (parents empty), or the nodes of a tree in topological
// order (parents[i] < i; -1 = the node follows the last committed token).
struct DraftProposal {
  Tokens tokens;                 // [N] (empty while `drawn` holds them)
  std::vector<int32_t> parents;  // [N] or empty (chain: parent of x_i is x_{i-1})
  at::Tensor q;                  // [N, V] processed draft probabilities, each row summing to 1:
                                 // row i is the law x_i was drawn from (the Drafter contract below).
                                 // Undefined for drafters without a distribution (n-gram, suffix).
  int64_t n_forwards = 0;        // draft-model forwards spent
  // Where propose() spent its time (draft, draft_catchup, sample, logits_copy, other); time it
  // does not charge counts as draft (speculative.cpp: PhaseClock::charge_parts).
  PhaseTimes ms;
  // Tokens drawn on the draft's device and not yet read, with their host copy queued: [N]
  // int64 there (-1: q had no mass). A draft model's, EAGLE's or Medusa's chain, or the nodes
  // of a tree from the tree drafter over any source (static, tree_budget 0: `parents` is then
  // set; dynamic with a fixed budget: drawn_parents). The
  // target's forward, its processors (target_probabilities) and the verifier take them from the
  // device, and the round's one read, the verdict, brings them in: read_drawn(true) then moves
  // them into `tokens`. Undefined for every other proposal.
  DeviceTokens drawn;
  // A tree grown on the drafter's device with its shape unread too (the tree drafter's dynamic
  // tree, fixed budget): its parents, [N] int64 there (-1: follows the last committed token),
  // host copy queued; `parents` stays empty until read_drawn moves them in. Set with `drawn`,
  // never alone.
  DeviceTokens drawn_parents;

  bool is_chain() const { return parents.empty() && !drawn_parents.defined(); }
  int64_t size() const { return drawn.defined() ? drawn.size() : static_cast<int64_t>(tokens.size()); }
  // Moves `drawn` into `tokens` (a no-op without), and drawn_parents into `parents`; synced as
  // DeviceTokens::read. A token of -1 is a named error.
  void read_drawn(bool synced);
  // Leaves picked tokens where they are: drawn = picks concatenated ([N] int64, each pick [n]),
  // their host copy queued for the verdict to bring in.
  void hold_drawn(const std::vector<at::Tensor>& picks);
  // Leaves a tree where it grew: its tokens and parents ([N] int64 each), host copies queued.
  void hold_tree(const at::Tensor& tokens, const at::Tensor& parents);
  // `drawn` as the target's forward and the verifier take it: [N] int64 on `device`, a -1 as 0
  // until read_drawn names it. Tokens on a GPU wanted on the CPU cost a read of their own.
  at::Tensor drawn_on(const at::Device& device) const;
  // Depth of node i (1 for a child of the last committed token).
  int64_t depth(int64_t i) const;
};

// What a drafter that learns from the target asks to be shown of its rows (Drafter::target_wants).
struct TargetWants {
  // > 0: the target's k likeliest next tokens (raw logits) of each fed row (Token Recycling's
  // adjacency table, Lookahead's Jacobi window).
  int64_t topk = 0;
  // The target's final normed hidden state (the output head's input) of each fed row: trained
  // drafters (EAGLE, Medusa: model/draft_heads.h), which also see the prompt's prefill's rows.
  bool features = false;
};

// The target's rows a drafter is shown (Round::rows). fed[0] is the last committed token,
// fed[i + 1] draft node i; parents as ForwardOptions::parents (-1 = follows the committed prefix;
// empty = a chain). In a batch (speculative/loop.cpp) each slot's drafter sees its own rows.
struct TargetRows {
  Tokens fed;
  std::vector<int32_t> parents;
  std::vector<Tokens> topk;  // [n_fed] rows of TargetWants::topk ids when asked; else empty
  at::Tensor hidden;         // [n_fed, d] when TargetWants::features; else undefined
};

// What a drafter is shown after each verification (Drafter::observe).
struct Round {
  // The committed sequence now holds n_valid + 1 tokens; its newest is in no cache yet (as in
  // propose()). A drafter with a cache keeps the first n_valid positions and drops the rest.
  int64_t n_valid = 0;
  // The proposal's accepted node indices, root first (a chain: 0..a-1).
  std::vector<int32_t> accepted;
  // The target's rows of this round when target_wants() asks for any; else empty.
  TargetRows rows;
};

// The contract of q. Speculative sampling is lossless only if each q row is the exact law the
// drafter drew its token from; the verifier cannot check this from one round, and a q that
// claims another law biases the output at temperature > 0 (greedy verification at T = 0 reads
// no q and stays exact). Row i of a proposal must be:
//  - chains: the distribution x_i was drawn from, conditional on x_1..x_{i-1} (the tokens
//    drafted before it in this round) and on the committed text;
//  - token trees: the distribution node i was drawn from given its path; siblings must be drawn
//    independently, with replacement, from their shared parent row (duplicates allowed), or, if
//    drawn otherwise (without replacement, say), row i must be node i's law given the siblings
//    drawn before it (its own row, not the parent's). Siblings drawn without replacement from
//    one shared row break multi-draft verification (test_strategies_drafter_contract);
//  - a drafter that picks its tokens deterministically (argmax, a lookup) gives no q (verified
//    tokens-only: lossless whatever the tokens) or one-hot rows on its tokens, never the soft
//    row it took the argmax of.
// "Drawn from" may condition on the drafter's own randomness, which is why that randomness must
// be independent of the verifier's uniforms: draw it from DrafterContext::rng (or a generator
// seeded from drafter_seed()), never from a generator seeded with Request::seed, whose stream
// is the verifier's uniforms; a drafter that replays them can choose tokens the verifier
// accepts and bias the output (test_strategies_drafter_contract).
//
// A drafter implements propose() and overrides only what else it needs: observe() to see what
// was accepted and roll back the rest (a drafter with a cache) or to learn from the target's rows
// (target_wants()), prefill(), report(). A tree drafter builds on the tree helper
// (drafters/tree.h), a draft-model drafter on the model helper (drafters/model.h).
class Drafter {
 public:
  virtual ~Drafter() = default;
  // sequence: all committed tokens (its last token is not yet in any cache). max_depth bounds
  // the length of every root-to-leaf path (a chain's length); tree drafters size their tree
  // from their own parameters within it. max_depth 0: propose nothing.
  virtual DraftProposal propose(const Tokens& sequence, int64_t max_depth) = 0;
  // After every verification: what was accepted, and the target's rows it asked for. A drafter
  // with state beyond the committed prefix (a cache's later positions) drops it here, or moves
  // the accepted path's cache slots together. Default: nothing (a drafter that reads only
  // `sequence`).
  virtual void observe(const Round& round) { (void)round; }
  // Before the first proposal: tokens = the prompt but its last token (the draft model's
  // prefill); features = the target's features of them, [n, d], when target_wants().features,
  // else undefined.
  virtual void prefill(const Tokens& tokens, const at::Tensor& features) {
    (void)tokens;
    (void)features;
  }
  // Whether prefill() may be skipped: propose() catches its state up from wherever it stands
  // (a draft model's cache fed from its length), so its first proposal prefills the prompt.
  // adaptive_gamma=cost then prefills only when the controller first drafts (docs/controller.md,
  // "Lazy draft prefill"). Default false.
  virtual bool prefill_later() const { return false; }
  // The most tokens its prefill feeds, however long the sequence (a draft model that reads only
  // a window of the prompt: draft_window); 0 = the whole sequence. The controller weighs a lazy
  // prefill by it.
  virtual int64_t prefill_window() const { return 0; }
  // The target rows (draft nodes) a proposal of this depth verifies by the drafter's shape, as
  // the controller weighs a round (adaptive_gamma=cost) until it has measured rounds of that
  // depth: a chain's depth (the default), a tree's node count (the tree drafter's static shape
  // or budget).
  virtual double rows_at(int64_t depth) const { return static_cast<double>(depth); }
  // The deepest proposal it ever makes, whatever max_depth allows (a static tree's shape,
  // Medusa's head count); the controller drafts no deeper. Default: no bound of its own.
  virtual int64_t deepest() const { return std::numeric_limits<int64_t>::max(); }
  // Whether its proposals carry q. The verifier reads each proposal's own q (tokens-only when
  // undefined), so this only describes the drafter; default false (a lookup: no q).
  virtual bool has_distribution() const { return false; }
  // What a drafter that learns from the target wants of its rows (TargetWants), shown to it in
  // Round::rows and, for features, in prefill(). Default: nothing.
  virtual TargetWants target_wants() const { return {}; }
  // Figures about this generation for Stats::drafter_stats (name -> value); none by default.
  virtual void report(std::map<std::string, double>& out) const { (void)out; }
};

// The seed of a request's drafter randomness (DrafterContext::rng, a Python drafter's
// context["seed"]), derived from the request's seed so that it is fixed for a seed, the same in
// batch-1 and batched runs, and independent of the verifier's uniforms (an Rng seeded with
// request_seed). With m(z) SplitMix64's finaliser (z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
// z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31) and the tag 0x64726166746572 ("drafter"
// in ASCII, one byte per letter): drafter_seed(s) = m(m(s) ^ tag).
uint64_t drafter_seed(uint64_t request_seed);

// What a drafter is built from.
struct DrafterContext {
  const Request& request;                // target, draft model (may be null), tokenizers, prompt
  const Params& params;                  // the speculative strategy's resolved parameters: a
                                         // drafter reads its own struct, params.typed<T>()
  const sampling::ProcessorConfig& proc; // the strategy's logits processors (q is processed alike)
  Rng& rng;                              // the drafter's own generator (its draws from q), seeded
                                         // with drafter_seed(request.seed): never the verifier's
  int64_t capacity;                      // positions a KV cache must hold for this request
  int64_t max_depth;                     // gamma_max: the longest draft path
  // adaptive_gamma=cost: the controller's measured costs of this drafter with this target (its
  // verify curve sizes a tree_budget=auto tree); null otherwise.
  std::shared_ptr<const CostTable> costs = nullptr;
};

// The drafters of a batch (speculative/loop.cpp): one slot per sequence. Slot b's proposals
// equal those of the Drafter a batch-1 run builds for the same request; a drafter with a model
// shares that model's forwards between the slots (DrafterInfo::batch_factory), the others run
// one Drafter per slot. make_batch_drafter() builds either.
class BatchDrafter {
 public:
  virtual ~BatchDrafter() = default;
  // Slot `slot` now drafts for ctx.request (replacing whatever it drafted for before); ctx.rng
  // outlives the slot's use.
  virtual void join(int64_t slot, const DrafterContext& ctx) = 0;
  // The slot's drafter: prefill, observe and report go to it as in a batch-1 run.
  virtual Drafter& at(int64_t slot) = 0;
  // One proposal per slot: at(b).propose(*seqs[b], max_depth[b]) for every b with
  // max_depth[b] > 0, an empty one for the others (seqs[b] may then be null). The time spent is
  // added to `ms` (the proposals' own `ms` stay empty when shared). Default: slot by slot, for
  // every b with seqs[b] set, max_depth 0 included (it proposes nothing then, but may see the
  // sequence, as in a batch-1 run).
  virtual std::vector<DraftProposal> propose(const std::vector<const Tokens*>& seqs,
                                             const std::vector<int64_t>& max_depth, PhaseTimes& ms);
};

struct DrafterInfo {
  std::string name;
  std::string description;               // one line
  std::vector<ParamSpec> params;         // the drafter's own parameters, with defaults
  // Parses the resolved text into the drafter's struct, with its range checks, and keeps it in
  // the params (Params::set_typed), once, when the speculative params are resolved (before any
  // model is loaded, so `specdec validate` and `generate` report a bad value at once); the
  // factories read params.typed<T>(). declare_params (strategies/param_table.h) sets it and
  // `params` from one ParamTable. Empty: no parameters.
  std::function<void(Params& resolved)> parse;
  bool needs_draft_model = false;        // true: Request::draft must be set
  // Non-empty: the drafter drafts with a head of kind head_kind (model/draft_heads.h) trained for
  // the target, whose directory the parameter head_param names (eagle: eagle_head).
  std::string head_param, head_kind;
  // true: at temperature > 0 it proposes chains with q, which block verification (verify=block)
  // needs; `specdec validate` refuses verify=block with any other drafter there.
  bool chains_with_q = false;
  std::function<std::unique_ptr<Drafter>(const DrafterContext&)> factory;
  // Optional: drafters for `batch` slots of `capacity` cache positions each that share their
  // model forwards. Returns null when it cannot serve this batch (then one `factory` drafter
  // per slot). Empty: always one per slot.
  std::function<std::unique_ptr<BatchDrafter>(const Request& first, const Params& params,
                                              const sampling::ProcessorConfig& proc, int64_t batch,
                                              int64_t capacity)> batch_factory;
};

// The registered drafters, in registry order: the built-in ones, then those added at run time.
// The reference (and any find_drafter reference) stays valid after later (un)registrations.
const std::vector<DrafterInfo>& all_drafters();
// Adds a drafter from outside the library (examples/register.cpp, the Python bindings' drafters
// written in Python), after the built-in ones. Its name must be new, not "auto", and 1-64 of
// [A-Za-z0-9_]. Its parameters join the speculative schema, which is made once, when the strategy
// registry is first read (drafter_params()): a drafter with parameters registers before that, at
// the start of main(); one registered later declares none. Throws specdec::Error naming the
// drafter and the problem.
void register_drafter(DrafterInfo info);
// Removes a drafter added by register_drafter; a built-in or unknown name is an error.
void unregister_drafter(const std::string& name);
// Throws specdec::Error listing the valid names.
const DrafterInfo& find_drafter(const std::string& name);
// Every drafter's parameters, once each (names are unique across drafters; checked). From the
// first call on, register_drafter takes no drafter with parameters.
std::vector<ParamSpec> drafter_params();
// The drafter a speculative run with these resolved params uses ("auto": model when a draft
// model is given, else ngram).
std::string resolve_drafter_name(const Params& params, bool have_draft_model);
// The drafters of such a run: the `drafters` list where one is given, else that one name.
std::vector<std::string> resolve_drafter_names(const Params& params, bool have_draft_model);
// find_drafter + checks (draft model present and compatible) + factory.
std::unique_ptr<Drafter> make_drafter(const std::string& name, const DrafterContext& ctx);
// The drafters of a batch of `batch` slots (speculative/loop.cpp): the drafter's batch_factory
// when it serves (`first`: the batch's first request), else one factory drafter per slot. Each
// join() is checked as make_drafter checks.
std::unique_ptr<BatchDrafter> make_batch_drafter(const std::string& name, const Request& first, const Params& params,
                                                 const sampling::ProcessorConfig& proc, int64_t batch,
                                                 int64_t capacity);
// Part of resolving the speculative params (speculative_info's parse): `drafter`, the parameter's
// value, is "auto" or a registered name (else an error listing them), and every drafter's
// struct is parsed and checked (DrafterInfo::parse), the chosen one's or not.
void parse_drafter_params(Params& resolved, const std::string& drafter);

// A drafter parameter holding a comma-separated list of integers ("4,2,2,1"), each in [lo, hi].
// Throws specdec::Error naming the drafter, the key, the whole value and the bad entry.
std::vector<int64_t> parse_int_list(const std::string& drafter, const std::string& key, const std::string& text,
                                    int64_t lo, int64_t hi);

// A draft token chosen where its row [V] of draft logits is, and left there: appended to
// `drafted` as [1] int64 (sampling::pick_tokens; -1: q had no mass). Greedy: the argmax (q not
// kept); else a draw from q with uniform u, its q row [1, V] appended to q_rows. The processors
// see `context` and then the tokens drafted so far, where they are (sampling::DeviceDraft): a
// repetition penalty reads none of them.
void pick_draft(const at::Tensor& row, const sampling::ProcessorConfig& proc, const Tokens& context,
                std::vector<at::Tensor>& drafted, double u, std::vector<at::Tensor>& q_rows);
// The probability the draft gave the token it just drew (pick_draft's last): its q row's entry,
// or (greedy, no q) the softmax of its logits row (before a repetition penalty). A read. The
// factor of speculative's draft_stop (a chain's own odds of being accepted whole).
double drawn_probability(const at::Tensor& row, const std::vector<at::Tensor>& q_rows, const at::Tensor& token);

// speculative's draft_stop as a drafter keeps it (docs/controller.md, "Confidence stopping"):
// the threshold, the drafts it cut short, and the rule, one for chains and trees.
struct DraftStop {
  double below = 0;       // draft_stop (0: off)
  int64_t n_stopped = 0;  // drafts it cut short (report(): draft_stops)
  bool on() const { return below > 0; }
  // Whether a draft whose own odds of being accepted are `odds` (a tree: its likeliest path's)
  // ends here; counted when it does.
  bool cut(double odds) {
    if (odds >= below) return false;
    ++n_stopped;
    return true;
  }
  // A chain's step: its odds times the probability the draft gave the token it just drew
  // (drawn_probability, a read), then cut().
  bool cut_after(double& odds, const at::Tensor& row, const std::vector<at::Tensor>& q_rows, const at::Tensor& token) {
    odds *= drawn_probability(row, q_rows, token);
    return cut(odds);
  }
  void report(std::map<std::string, double>& out) const {
    if (on()) out["draft_stops"] = static_cast<double>(n_stopped);
  }
};

// Structured output's drafts inside the grammar (issue 57, item 4; speculative's draft_mask, on
// by default): a drafter's own matcher (sampling::ConstraintState), which follows its draft, and
// the target's logits' width. Unset where the request has no constraint or draft_mask is off:
// the drafter then drafts as without one.
//  - A drafter that draws from logits (model, layer_skip, eagle, medusa, tree) masks each draft
//    row after its path (ConstraintState::mask_draft) before its processors and its draw, so q
//    is the masked law it drew from.
//  - A lookup drafter (ngram, suffix, recycling, lookahead: no q) cuts its proposal with
//    keep_admitted.
struct DraftGrammar {
  std::shared_ptr<sampling::ConstraintState> state;
  int64_t n_vocab = 0;
  explicit operator bool() const { return state != nullptr; }
};
DraftGrammar draft_grammar(const DrafterContext& ctx);
// Cuts `d` to the nodes the grammar admits after `seq` (ConstraintState::admitted): a chain at
// its first refused token, a tree without its refused nodes and everything below them, so no
// token is proposed that the target's masked row gives probability 0. The kept nodes keep their
// order (parents renumbered, q rows kept with their nodes; an unread draft is read first).
// Returns the kept nodes' indices in the proposal as it was; every index when `g` is unset.
std::vector<int32_t> keep_admitted(DraftProposal& d, const DraftGrammar& g, const Tokens& seq);

// Structured output's forced tokens (issue 57, item 5; sampling::ConstraintState::forced): the
// tokens the grammar admits one at a time after the committed text are drafted without the
// drafter, which proposes after them as if they were committed (it is shown committed text +
// forced as its sequence). prepend_forced makes the round's proposal: the forced chain first,
// the drafter's chain after it, or its tree's roots below the last forced token. Their q rows
// are one-hot (their honest law: nothing was drawn) where the drafter's proposal has q; a
// proposal without q (an n-gram lookup's, or none at all) stays tokens-only, which is lossless
// whatever the tokens. The masked target puts all its mass on each forced token, so every
// verify mode accepts them. An unread draft (DraftProposal::drawn) is read first.
void prepend_forced(DraftProposal& d, const Tokens& forced);
// The round as the drafter of such a proposal sees it: its own nodes (the accepted ones renumbered
// from 0, its rows from the last forced token's on).
Round drafter_round(const Round& round, int64_t n_forced);
// The round as a drafter that sat it out sees it (speculative's `drafters`: another drafted):
// nothing of its own accepted, the target's rows of the last committed token only, as in a
// round where it proposed nothing.
Round sat_out(const Round& round);

// Longest root-to-leaf path of a proposal (a chain: its length).
int64_t max_depth(const DraftProposal& d);

// Throws specdec::Error when a draft tokenizer cannot stand in for the target's: different
// vocabulary size, BOS/EOS/special ids, or any of a spread sample of token strings.
void check_tokenizers_compatible(const tokenizer::Tokenizer& tgt, const tokenizer::Tokenizer& dft);

}  // namespace specdec::strategies
