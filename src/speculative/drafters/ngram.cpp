// ngram: prompt lookup (Saxena 2023). Finds the most recent earlier occurrence of the
// sequence's last n tokens (n from ngram_max down to ngram_min) and proposes the tokens that
// followed it. No draft model, no distribution: the verifier runs in tokens_only mode.
#include <algorithm>

#include "core/error.h"
#include "speculative/proposer.h"

namespace specdec::strategies {
namespace {

constexpr int64_t k_max_ngram = 64;  // the scan is O(n * ngram_max) per round

class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t min_n, int64_t max_n, DraftGrammar grammar)
      : min_n_(min_n), max_n_(max_n), grammar_(std::move(grammar)) {}

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    DraftProposal out;
    const int64_t n = static_cast<int64_t>(seq.size());
    if (max_depth <= 0) return out;
    for (int64_t len = std::min(max_n_, n - 1); len >= min_n_; --len) {
      const TokenId* suffix = seq.data() + (n - len);
      // Most recent earlier match first: recent text is the likeliest to be copied again.
      for (int64_t j = n - len - 1; j >= 0; --j) {
        if (!std::equal(suffix, suffix + len, seq.data() + j)) continue;
        const int64_t from = j + len, to = std::min(n, from + max_depth);
        out.tokens.assign(seq.begin() + from, seq.begin() + to);
        keep_admitted(out, grammar_, seq);  // structured output: up to the first refused token
        return out;
      }
    }
    return out;
  }

 private:
  int64_t min_n_, max_n_;
  DraftGrammar grammar_;
};

struct NgramParams {
  int64_t min = 0, max = 0;
};

ParamTable<NgramParams> ngram_params() {
  return ParamTable<NgramParams>()
      .field("ngram_min", &NgramParams::min, "1", "shortest suffix the n-gram drafter matches")
      .field("ngram_max", &NgramParams::max, "3", "longest suffix the n-gram drafter matches")
      .finish([](NgramParams& p) {
        SD_CHECK(p.min >= 1 && p.max >= p.min && p.max <= k_max_ngram,
                 "drafter ngram: need 1 <= ngram_min <= ngram_max <= ", k_max_ngram, ", got ngram_min=", p.min,
                 " ngram_max=", p.max);
      });
}

}  // namespace

DrafterInfo ngram_drafter_info() {
  DrafterInfo info;
  info.name = "ngram";
  info.description = "prompt lookup: copies what followed the latest earlier occurrence of the last n tokens";
  declare_params(info, ngram_params());
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    const NgramParams& p = ctx.params.typed<NgramParams>();
    return std::make_unique<NgramDrafter>(p.min, p.max, draft_grammar(ctx));
  };
  return info;
}

}  // namespace specdec::strategies
