#pragma once
// The verifier: a round's verdict from the target's processed rows and the draft (Verdict,
// verify_mode, verify_round), the synthetic verdict of benchmarking runs, and the round's count
// into the statistics. It sees plain arrays: a DraftProposal and the scorer's rows.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "speculative/proposer.h"

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
// grouped by mode, one call per group (verifier.cpp).
std::vector<Verdict> verify_round(kernels::Backend& backend, const VerifySetup& cfg,
                                  const std::vector<const DraftProposal*>& drafts, const std::vector<at::Tensor>& p,
                                  const std::vector<Rng*>& rngs);
// Counts one verification round into the statistics (per position = per depth for trees).
void count_round(Stats& st, const DraftProposal& d, const Verdict& v);

}  // namespace specdec::strategies
