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

void check_ngram_params(const Params& p) {
  const int64_t lo = p.get_int("ngram_min"), hi = p.get_int("ngram_max");
  SD_CHECK(lo >= 1 && hi >= lo && hi <= k_max_ngram, "drafter ngram: need 1 <= ngram_min <= ngram_max <= ",
           k_max_ngram, ", got ngram_min=", lo, " ngram_max=", hi);
}

}  // namespace

DrafterInfo ngram_drafter_info() {
  DrafterInfo info;
  info.name = "ngram";
  info.description = "prompt lookup: copies what followed the latest earlier occurrence of the last n tokens";
  info.params = {
      {"ngram_min", "int", "1", "shortest suffix the n-gram drafter matches"},
      {"ngram_max", "int", "3", "longest suffix the n-gram drafter matches"},
  };
  info.check = check_ngram_params;
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    return std::make_unique<NgramDrafter>(ctx.params.get_int("ngram_min"), ctx.params.get_int("ngram_max"),
                                          draft_grammar(ctx));
  };
  return info;
}

}  // namespace specdec::strategies
