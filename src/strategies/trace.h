#pragma once
// A trace of one generation for `specdec trace` / `generate --trace`: per round the drafts,
// which were accepted, the target's and the draft's distributions (top-k) where they were
// compared, the residual a corrected token was drawn from, and the round's phase times.
//
// The speculative loop calls round() once per verification round and autoregressive_decode
// calls step() once per token (a round without drafts), with the data they already hold.
// The recorder reduces it at once to what the view needs (top-k rows, the drafted token's p
// and q), so a trace of a few hundred tokens stays a few hundred kilobytes.
//
// to_json() gives the "rounds" part of trace.json (schema: configs/README.md, "trace.json").
#include <ATen/ATen.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/types.h"
#include "sampling/processors.h"
#include "strategies/phases.h"
#include "strategies/strategy.h"

namespace specdec::tokenizer { class Tokenizer; }

namespace specdec::strategies {

struct DraftProposal;  // speculative/proposer.h

class TraceRecorder {
 public:
  // tokenizer: decodes token pieces for the view. resolved: the strategy's resolved parameters
  // (the processor chain for autoregressive steps; `verify` for the residual). top_k: entries
  // kept per distribution row.
  TraceRecorder(std::shared_ptr<tokenizer::Tokenizer> tokenizer, const Params& resolved, int64_t top_k = 10);

  // One verification round. p: [N+1, V] processed target probabilities (row 0 follows the
  // last committed token, row i + 1 follows draft node i); path: the accepted nodes, root
  // first; committed: the tokens this round added to the sequence (the accepted path's tokens,
  // then the corrected or bonus token, cut at EOS); cumulative: the generation's phase times
  // so far (the recorder keeps the difference to the previous call).
  void round(const DraftProposal& d, const at::Tensor& p, const std::vector<int32_t>& path, const Tokens& committed,
             const PhaseTimes& cumulative);
  // One autoregressive step. logits_row: [V] raw target logits; context: the sequence up to
  // and including the chosen token.
  void step(const at::Tensor& logits_row, const Tokens& context, const PhaseTimes& cumulative);

  int64_t n_rounds() const { return static_cast<int64_t>(rounds_.size()); }
  // {"top_k", "setup_ms", "prefill_ms", "rounds": [...]}
  nlohmann::json to_json() const;

 private:
  nlohmann::json top_entries(const float* row, int64_t n_vocab) const;
  nlohmann::json token_json(TokenId id) const;
  nlohmann::json round_phases(const PhaseTimes& cumulative);

  std::shared_ptr<tokenizer::Tokenizer> tokenizer_;
  sampling::ProcessorConfig proc_;
  bool block_verify_ = false;
  int64_t top_k_;
  PhaseTimes seen_;  // cumulative phase times at the previous call
  double setup_ms_ = 0, prefill_ms_ = 0;
  std::vector<nlohmann::json> rounds_;
};

}  // namespace specdec::strategies
