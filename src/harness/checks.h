#pragma once
// Distribution checks of speculative decoding against the target model. These functions
// take plain vectors (samples, exact probabilities, log-likelihoods) so they are testable
// without a model; the runner gathers the inputs (cell_checks.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "core/types.h"
#include "harness/metrics.h"

namespace specdec::harness {

// Greedy: candidate outputs must equal the baseline's token for token. A mismatch names
// the prompt and the first differing position.
CheckOutcome greedy_equality_check(const std::vector<std::string>& prompt_ids, const std::vector<Tokens>& baseline,
                                   const std::vector<Tokens>& candidate);

// The same from samples.jsonl lines (metrics.h: lines_of): every candidate turn of repeat 0
// against the baseline's turn of the same prompt ("<prompt> turn N" from the second turn on).
CheckOutcome greedy_equality(const std::vector<const nlohmann::json*>& cand_lines,
                             const std::vector<const nlohmann::json*>& base_lines);

// First generated token vs the target's exact processed distribution p: // [V]
// bins are the top_k tokens of p plus "other"; Pearson chi-square and G-test, each at
// significance/2 (Bonferroni); reports the TV distance the test detects with 80% power.
CheckOutcome first_token_check(const std::vector<double>& p, const std::vector<TokenId>& first_tokens,
                               int64_t top_k, double significance);

// Baseline vs candidate samples over the first L positions: per-position two-sample
// chi-square on token histograms (tokens seen < 5 times in both samples pooled; a sequence
// that ended before position t counts as "ended"), and Mann-Whitney on the target
// log-likelihoods of the sequences. L + 1 tests, Bonferroni-adjusted p = min(1, (L+1) min p).
CheckOutcome sequence_check(const std::vector<Tokens>& baseline, const std::vector<Tokens>& candidate,
                            const std::vector<double>& baseline_loglik, const std::vector<double>& candidate_loglik,
                            int64_t length, double significance);

}  // namespace specdec::harness
