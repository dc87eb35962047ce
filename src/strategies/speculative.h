#pragma once
// Pieces of the speculative strategy that are useful (and tested) on their own.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "strategies/drafters.h"

namespace specdec::tokenizer { class Tokenizer; }
namespace specdec::kernels { class Backend; }

namespace specdec::strategies {

// The verifier's view of one round: plain arrays (DESIGN principle 2).
struct Verdict {
  std::vector<int32_t> path;  // accepted draft nodes, root first (a chain: 0..a-1)
  Tokens emitted;             // their tokens, then the corrected / bonus token
  std::optional<kernels::VerifyMode> mode;  // the kernel mode that verified it (none: no draft)
  int64_t n_accepted() const { return static_cast<int64_t>(path.size()); }
};

// Benchmarking the loop (speculative's synthetic_acceptance; never the default): a verdict that
// accepts draft nodes at random instead of verifying them, a chain position by position and a
// tree's children in order, the first accepted one taken (Sequoia's positional model). ranks:
// the acceptance probability of a node's first child tried, of its second, ...; the last value
// holds for every later child (one value: the same for all; a chain uses ranks[0] only). The
// bonus token is best[node + 1][0], the target's likeliest token after the last accepted node
// (best: top_token_ids(p, 1) as rows). Its tokens are NOT the target's.
Verdict synthetic_verdict(const DraftProposal& d, const std::vector<Tokens>& best, const std::vector<double>& ranks,
                          Rng& rng);
// "a" or "a1,a2,...", each in [0, 1], as synthetic_verdict's ranks; else a named error.
std::vector<double> parse_synthetic(const std::string& text);

// What verification takes from the speculative strategy's resolved configuration.
struct VerifySetup {
  sampling::ProcessorConfig proc;
  bool block_verify = false;  // verify=block
  std::string drafter;        // the drafter's name, for errors
};

// The kernel mode verifying proposal d: greedy at temperature 0 (every mode is exactly greedy
// verification there); else for a chain block (verify=block) or token-wise sampling with q,
// for a tree multi-draft sampling with q, and tokens_only without q. verify=block with a tree or
// a chain without q is an error naming the drafter, never a silent fallback.
kernels::VerifyMode verify_mode(const VerifySetup& cfg, const DraftProposal& d);
// The named error for verify=block with a drafter that does not propose chains with q (`what`
// it did), listing the drafters that do (DrafterInfo::chains_with_q).
[[noreturn]] void refuse_block_verify(const std::string& drafter, const std::string& what);
// Verifies one round of one or more sequences: drafts[i] against p[i] ([k_i + 1, V], the
// processed target rows on the target's device: row 0 after the committed text, row j + 1
// after draft node j), with k_i + 1 uniforms (53-bit) drawn from rngs[i] after its draft. A
// sequence without a draft samples p[i] row 0; the others go to the chain or the tree kernel,
// grouped by mode, one call per group (verify_round.cpp).
std::vector<Verdict> verify_round(kernels::Backend& backend, const VerifySetup& cfg,
                                  const std::vector<const DraftProposal*>& drafts, const std::vector<at::Tensor>& p,
                                  const std::vector<Rng*>& rngs);
// The target's parents for a tree round's fed tokens [last committed, node 0, ...]
// (ForwardOptions::parents: the root follows the cache, node i's parent moves up by one). A
// tree whose shape is unread (DraftProposal::drawn_parents) gives them as device_parents on
// the target's device, without a read.
model::ForwardOptions tree_forward_options(const DraftProposal& d, const at::Device& target);
// The processed target rows of a round's logits [k + 1, V] (sampling::probabilities): row 0
// after the committed text `seq`, row j + 1 after it and draft node j's path. A draft held
// unread (DraftProposal::drawn) is taken where it is (sampling::DeviceDraft): no read.
at::Tensor target_probabilities(const at::Tensor& logits, const sampling::ProcessorConfig& proc, const Tokens& seq,
                                const DraftProposal& d);
// The k likeliest tokens of each row, best first (k = 1: the argmax, ties -> lowest id), in two
// halves so that they cost no read of their own: top_token_ids queues them for the host
// (model::to_host_async) before the round's verdict is read; token_rows takes them after.
// logits: [n, V] -> [n, k] int64 on the host, complete after the next read.
at::Tensor top_token_ids(const at::Tensor& logits, int64_t k);
std::vector<Tokens> token_rows(const at::Tensor& ids);
// Longest root-to-leaf path of a proposal (a chain: its length).
int64_t max_depth(const DraftProposal& d);
// Counts one verification round into the statistics (per position = per depth for trees).
void count_round(Stats& st, const DraftProposal& d, const Verdict& v);

// What the batched loop needs from the speculative strategy: its resolved configuration; the
// drafter comes from the registry (make_batch_drafter) as generate()'s does (make_drafter).
struct SpecBatchSetup {
  VerifySetup verify;
  int64_t gamma = 4, gamma_max = 8;
  std::string adaptive = "off";
  Params params;  // resolved: the drafter's name and its own parameters
};

// Speculative decoding of a batch (strategies/batch.h for slots, refill and exactness): each
// round drafts for every sequence (own RNG, draft length and gamma control; a drafter with a
// model shares its forwards between the sequences: BatchDrafter), scores every
// active sequence's [last committed, draft...] in one ragged target forward (a newcomer's
// prompt rides along), verifies all chains in one kernel call (VerifyArgs.batch, ragged
// n_draft) and rolls each sequence back on its own. Token trees are refused by name.
std::vector<Result> speculative_decode_batch(const SpecBatchSetup& setup, const std::vector<Request>& requests,
                                             const BatchOptions& options, const BatchTokenCallback& on_token);

// Throws specdec::Error when a draft tokenizer cannot stand in for the target's: different
// vocabulary size, BOS/EOS/special ids, or any of a spread sample of token strings.
void check_tokenizers_compatible(const tokenizer::Tokenizer& tgt, const tokenizer::Tokenizer& dft);

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
