// lookahead: Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM
// Inference Using Lookahead Decoding") on the propose/verify loop. Greedy decoding is the fixed
// point of the Jacobi iteration x_{i+1} = argmax p(. | prefix, x_1..x_i) over a window of W
// guessed future tokens; the iterates are poor guesses of the future but their trajectory
// holds n-grams the model likes, which are kept in a pool keyed by their first token and
// verified when that token is the last committed one.
//
// Each round proposes one tree, both branches children of the last committed token:
//  - verification branch: up to G = lookahead_verify pooled n-grams that start with the last
//    committed token (their N-1 continuation tokens, newest first), merged into a trie;
//  - window branch: the W = lookahead_window current guesses g_1..g_W for positions n..n+W-1
//    as a chain (cut to the round's max depth).
// observe() reads the target's top-1 y_i of every row of the window (y_0 from the root's row):
// y_i is the prediction after guess i, so it becomes the guess for position n+i, the Jacobi
// iterate, and the window is realigned to the committed length at the next propose()
// (positions the round committed are dropped, the end is refilled with random prompt
// tokens). An iterate's n-grams are read along the diagonal of the last N-1 fed windows and
// the new outputs, by absolute position p: (G_{r-N+2}[p], G_{r-N+3}[p+1], ..., G_r[p+N-2],
// Y_r[p+N-1]) -- each token was predicted after the one before it in the previous iterate, as
// in the paper's 2D window.
//
// Differences from the paper: its lookahead branch feeds the N-1 past levels of the window in
// every forward and advances one level; here one level (the current window) is fed per round
// and the earlier levels are the windows fed in the previous N-2 rounds, so collecting starts
// in round N-1 and a round costs W + G(N-1) rows instead of W(N-1) + G(N-1). Window positions
// are absolute, so a round that commits m tokens shifts the window by m. The pool is also
// seeded with the prompt's n-grams (lookahead_prompt_ngrams; the reference code's
// "pool from prompt" option), and window nodes may be accepted themselves (lossless). No
// distribution: verification is greedy or tokens_only.
#include <algorithm>
#include <deque>
#include <unordered_map>

#include "core/error.h"
#include "speculative/proposer.h"

namespace specdec::strategies {
namespace {

constexpr int64_t k_max_ngram_n = 16, k_max_window = 64, k_max_verify = 64, k_max_pool = 1024;

struct LookaheadConfig {
  int64_t n = 0, w = 0, g = 0, pool = 0;
  bool prompt_ngrams = true;
};

void check_lookahead_config(LookaheadConfig& c) {
  SD_CHECK(c.n >= 2 && c.n <= k_max_ngram_n, "drafter lookahead: lookahead_ngram must be in [2, ", k_max_ngram_n,
           "], got ", c.n);
  SD_CHECK(c.w >= 1 && c.w <= k_max_window, "drafter lookahead: lookahead_window must be in [1, ", k_max_window,
           "], got ", c.w);
  SD_CHECK(c.g >= 0 && c.g <= k_max_verify, "drafter lookahead: lookahead_verify must be in [0, ", k_max_verify,
           "], got ", c.g);
  SD_CHECK(c.pool >= 1 && c.pool <= k_max_pool, "drafter lookahead: lookahead_pool must be in [1, ", k_max_pool,
           "], got ", c.pool);
  const int64_t nodes = c.w + c.g * (c.n - 1);
  SD_CHECK(nodes <= k_max_draft_nodes, "drafter lookahead: lookahead_window + lookahead_verify * (lookahead_ngram - 1) = ",
           c.w, " + ", c.g, " * ", c.n - 1, " = ", nodes, " nodes, more than the limit of ", k_max_draft_nodes);
}

// Tokens at absolute positions [start, start + size).
struct Span {
  int64_t start = 0;
  Tokens tokens;
  bool has(int64_t pos) const { return pos >= start && pos < start + static_cast<int64_t>(tokens.size()); }
  TokenId at(int64_t pos) const { return tokens[pos - start]; }
};

class LookaheadDrafter : public Drafter {
 public:
  LookaheadDrafter(const LookaheadConfig& cfg, uint64_t seed, DraftGrammar grammar)
      : cfg_(cfg), rng_(seed ^ 0x6c6f6f6b61686561ULL), grammar_(std::move(grammar)) {}

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override;
  TargetWants target_wants() const override { return {1, false}; }
  void observe(const Round& round) override;
  void report(std::map<std::string, double>& out) const override;

 private:
  void start(const Tokens& prompt);
  void realign(int64_t n);
  TokenId random_prompt_token() { return fill_[rng_.next() % fill_.size()]; }
  void add_ngram(TokenId first, Tokens rest);
  void collect_ngrams(const Span& outputs);
  void learn_window(const TargetRows& rows);  // the Jacobi step from the window's rows
  void add_candidates(TokenId last, int64_t max_depth, DraftProposal& out) const;

  LookaheadConfig cfg_;
  Rng rng_;
  DraftGrammar grammar_;
  Tokens fill_;                                             // prompt tokens: window (re)fills
  std::unordered_map<TokenId, std::deque<Tokens>> pool_;    // first token -> N-1 followers, newest first
  Span window_;                                             // current guesses (W after realign)
  std::deque<Span> fed_windows_;                            // the last N-1 fed windows, oldest first
  // The last proposal: node index of the first window node and the number fed (0: none).
  int32_t win_first_ = 0;
  int64_t win_len_ = 0, n_proposed_ = -1;
  int64_t n_rounds_ = 0, n_nodes_ = 0, n_ngrams_ = 0, n_acc_window_ = 0, n_acc_ngram_ = 0;
};

// The paper starts the window from random prompt tokens; the generator is seeded from the
// request's seed, so proposals are reproducible.
void LookaheadDrafter::start(const Tokens& prompt) {
  fill_ = prompt;
  window_ = Span{static_cast<int64_t>(prompt.size()), {}};
  for (int64_t i = 0; i < cfg_.w; ++i) window_.tokens.push_back(random_prompt_token());
  if (!cfg_.prompt_ngrams) return;
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t i = 0; i + cfg_.n <= n; ++i)
    add_ngram(prompt[i], Tokens(prompt.begin() + i + 1, prompt.begin() + i + cfg_.n));
}

// Moves the window to start at the committed length n: guesses for committed positions go,
// missing guesses at the end are random prompt tokens.
void LookaheadDrafter::realign(int64_t n) {
  if (n < window_.start) window_ = Span{n, {}};  // not a continuation of the last sequence
  const int64_t drop = std::min<int64_t>(n - window_.start, static_cast<int64_t>(window_.tokens.size()));
  window_.tokens.erase(window_.tokens.begin(), window_.tokens.begin() + drop);
  window_.start = n;
  if (static_cast<int64_t>(window_.tokens.size()) > cfg_.w) window_.tokens.resize(cfg_.w);
  while (static_cast<int64_t>(window_.tokens.size()) < cfg_.w) window_.tokens.push_back(random_prompt_token());
}

void LookaheadDrafter::add_ngram(TokenId first, Tokens rest) {
  auto& cands = pool_[first];
  const auto it = std::find(cands.begin(), cands.end(), rest);
  if (it != cands.end()) cands.erase(it);
  cands.push_front(std::move(rest));
  if (static_cast<int64_t>(cands.size()) > cfg_.pool) cands.pop_back();
}

// Up to G pooled continuations of `last` (newest first, cut to max_depth), merged into a trie
// under the root.
void LookaheadDrafter::add_candidates(TokenId last, int64_t max_depth, DraftProposal& out) const {
  const auto it = pool_.find(last);
  if (it == pool_.end()) return;
  int64_t used = 0;
  for (const Tokens& cand : it->second) {
    if (used++ == cfg_.g) break;
    int32_t parent = -1;
    for (int64_t i = 0; i < std::min<int64_t>(max_depth, static_cast<int64_t>(cand.size())); ++i) {
      int32_t child = -1;
      for (int32_t j = 0; j < static_cast<int32_t>(out.tokens.size()) && child < 0; ++j)
        if (out.parents[j] == parent && out.tokens[j] == cand[i]) child = j;
      if (child < 0) {
        child = static_cast<int32_t>(out.tokens.size());
        out.tokens.push_back(cand[i]);
        out.parents.push_back(parent);
      }
      parent = child;
    }
  }
}

DraftProposal LookaheadDrafter::propose(const Tokens& seq, int64_t max_depth) {
  DraftProposal out;
  if (seq.empty()) return out;
  if (fill_.empty()) start(seq);
  const int64_t n = static_cast<int64_t>(seq.size());
  realign(n);
  n_proposed_ = n;
  win_len_ = 0;
  if (max_depth <= 0) return out;
  add_candidates(seq.back(), max_depth, out);
  win_first_ = static_cast<int32_t>(out.tokens.size());
  win_len_ = std::min(cfg_.w, max_depth);
  for (int64_t i = 0; i < win_len_; ++i) {
    out.tokens.push_back(window_.tokens[i]);
    out.parents.push_back(i == 0 ? -1 : win_first_ + static_cast<int32_t>(i) - 1);
  }
  if (grammar_) {  // structured output: without the nodes the grammar refuses (the window: a prefix)
    const std::vector<int32_t> kept = keep_admitted(out, grammar_, seq);
    const auto n_ngram = std::count_if(kept.begin(), kept.end(), [this](int32_t i) { return i < win_first_; });
    win_len_ = static_cast<int64_t>(kept.size()) - n_ngram;
    win_first_ = static_cast<int32_t>(n_ngram);
  }
  ++n_rounds_;
  n_nodes_ += out.size();
  return out;
}

// The n-grams on the diagonals of the last N-1 fed windows and the new outputs.
void LookaheadDrafter::collect_ngrams(const Span& outputs) {
  if (static_cast<int64_t>(fed_windows_.size()) < cfg_.n - 1) return;
  const Span& oldest = fed_windows_.front();
  for (int64_t p = oldest.start; p < oldest.start + static_cast<int64_t>(oldest.tokens.size()); ++p) {
    Tokens gram;
    for (int64_t j = 0; j < cfg_.n - 1 && fed_windows_[j].has(p + j); ++j) gram.push_back(fed_windows_[j].at(p + j));
    if (static_cast<int64_t>(gram.size()) < cfg_.n - 1 || !outputs.has(p + cfg_.n - 1)) continue;
    gram.push_back(outputs.at(p + cfg_.n - 1));
    add_ngram(gram[0], Tokens(gram.begin() + 1, gram.end()));
    ++n_ngrams_;
  }
}

// y_0 (the root's row) and y_i (the row of guess i) are the next Jacobi iterate for positions
// n..n+len; guesses beyond the fed part of the window stay. Then the accepted nodes are counted
// by branch, and the proposal is done with.
void LookaheadDrafter::observe(const Round& round) {
  learn_window(round.rows);
  for (int32_t node : round.accepted) {
    if (win_len_ > 0 && node >= win_first_) ++n_acc_window_;
    else ++n_acc_ngram_;
  }
  win_len_ = 0;
  n_proposed_ = -1;
}

void LookaheadDrafter::learn_window(const TargetRows& rows) {
  const Tokens& fed = rows.fed;
  const std::vector<Tokens>& topk = rows.topk;
  if (n_proposed_ < 0 || win_len_ == 0 || static_cast<int64_t>(topk.size()) < win_first_ + win_len_ + 1) return;
  SD_CHECK(fed.size() == topk.size(), "drafter lookahead: ", fed.size(), " fed tokens but ", topk.size(),
           " top-1 rows (internal error)");
  Span outputs{n_proposed_, {topk[0].at(0)}};
  for (int64_t i = 1; i <= win_len_; ++i) outputs.tokens.push_back(topk[win_first_ + i].at(0));
  fed_windows_.push_back(Span{n_proposed_, Tokens(window_.tokens.begin(), window_.tokens.begin() + win_len_)});
  if (static_cast<int64_t>(fed_windows_.size()) > cfg_.n - 1) fed_windows_.pop_front();
  collect_ngrams(outputs);
  for (int64_t q = win_len_ + 1; q < static_cast<int64_t>(window_.tokens.size()); ++q)
    outputs.tokens.push_back(window_.tokens[q]);
  window_ = std::move(outputs);
}

void LookaheadDrafter::report(std::map<std::string, double>& out) const {
  if (n_rounds_ > 0) out["lookahead_nodes_mean"] = double(n_nodes_) / double(n_rounds_);
  out["lookahead_ngrams_from_window"] = static_cast<double>(n_ngrams_);
  out["lookahead_accepted_window"] = static_cast<double>(n_acc_window_);
  out["lookahead_accepted_ngram"] = static_cast<double>(n_acc_ngram_);
}

}  // namespace

DrafterInfo lookahead_drafter_info() {
  DrafterInfo info;
  info.name = "lookahead";
  info.description = "Lookahead decoding: a Jacobi window of guesses plus n-grams collected from its trajectory, "
                     "verified as one tree (no draft model)";
  using C = LookaheadConfig;
  declare_params(info,
                 ParamTable<C>()
                     .field("lookahead_ngram", &C::n, "4", "lookahead: n-gram size N (candidates propose N-1 tokens)")
                     .field("lookahead_window", &C::w, "4",
                            "lookahead: Jacobi window W (guess tokens fed per round; cut to gamma)")
                     .field("lookahead_verify", &C::g, "4", "lookahead: pooled n-grams G verified per round")
                     .field("lookahead_pool", &C::pool, "8", "lookahead: n-grams kept per start token (newest kept)")
                     .field("lookahead_prompt_ngrams", &C::prompt_ngrams, "true",
                            "lookahead: seed the pool with the prompt's n-grams")
                     .finish(check_lookahead_config));
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    return std::make_unique<LookaheadDrafter>(ctx.params.typed<C>(), ctx.request.seed, draft_grammar(ctx));
  };
  return info;
}

}  // namespace specdec::strategies
