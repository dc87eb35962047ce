// suffix: retrieval over prompt + output, generalising prompt lookup (ngram) the way
// SAM-Decoding and REST do. A suffix automaton of the committed sequence, extended one token at
// a time, gives the longest suffix of the sequence that occurred earlier (up to
// suffix_max_match tokens) in amortised O(1); the drafter proposes what followed its most
// recent earlier occurrence. With suffix_tree_width = W > 1 it proposes the distinct
// continuations of up to W earlier occurrences (longest matches first, then shorter ones),
// merged into a trie. No distribution: the verifier runs in tokens_only mode.
#include <algorithm>

#include "core/error.h"
#include "speculative/proposer.h"

namespace specdec::strategies {
namespace {

constexpr int64_t k_max_suffix_match = 1024;  // each append walks <= suffix_max_match states
constexpr int64_t k_max_tree_width = 16;      // a tree has <= width * max_depth nodes

// Suffix automaton (Blumer et al. 1985) of a token sequence s[0..n). Each state is a set of
// substrings with the same end positions ("endpos"): lengths (len(link), len]. Besides the
// automaton it keeps, per state, the `n_recent` newest end positions, exact for every state
// that holds a string of <= max_match tokens; longer-only states are never asked (queries are
// capped at max_match), so appending costs O(max_match * n_recent) instead of the length of
// the whole suffix-link chain (O(n) on a run of one repeated token).
class SuffixIndex {
 public:
  SuffixIndex(int64_t max_match, int64_t n_recent) : max_match_(max_match), n_recent_(n_recent) { clear(); }

  void clear();
  void append(TokenId t);
  const Tokens& text() const { return text_; }
  // End positions (newest first, at most `width`, all < n - 1) of earlier occurrences of the
  // longest suffix of the text that occurred earlier, capped at max_match tokens, then of
  // shorter suffixes down to `min_match` tokens. Empty when no suffix of >= min_match tokens
  // occurred earlier.
  std::vector<int64_t> earlier_ends(int64_t min_match, int64_t width) const;

 private:
  struct State {
    int64_t len = 0;                               // longest string of the state
    int32_t link = -1;                             // state of the longest shorter suffix with other endpos
    std::vector<std::pair<TokenId, int32_t>> next; // transitions, sorted by token
    std::vector<int64_t> recent;                   // newest end positions first
  };

  int32_t step(int32_t s, TokenId t) const;
  void set_step(int32_t s, TokenId t, int32_t to);
  int32_t extend(TokenId t);  // the classic online construction; returns the new state
  void note_end(int32_t s, int64_t pos);

  int64_t max_match_, n_recent_;
  Tokens text_;
  std::vector<State> st_;
  int32_t last_ = 0;     // state of the whole text
  int32_t capped_ = 0;   // state holding the text's suffix of min(max_match, n) tokens
  // The state split by the last extend (-1: none) and its new clone.
  int32_t split_ = -1, clone_ = -1;
};

void SuffixIndex::clear() {
  text_.clear();
  st_.assign(1, State{});  // the root: the empty string
  last_ = capped_ = 0;
  split_ = clone_ = -1;
}

int32_t SuffixIndex::step(int32_t s, TokenId t) const {
  const auto& v = st_[s].next;
  auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(t, int32_t(-1)));
  return it != v.end() && it->first == t ? it->second : -1;
}

void SuffixIndex::set_step(int32_t s, TokenId t, int32_t to) {
  auto& v = st_[s].next;
  auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(t, int32_t(-1)));
  if (it != v.end() && it->first == t) it->second = to;
  else v.insert(it, {t, to});
}

int32_t SuffixIndex::extend(TokenId t) {
  const int32_t cur = static_cast<int32_t>(st_.size());
  st_.push_back(State{});
  st_[cur].len = st_[last_].len + 1;
  st_[cur].recent = {static_cast<int64_t>(text_.size()) - 1};
  split_ = clone_ = -1;
  int32_t x = last_;
  for (; x != -1 && step(x, t) == -1; x = st_[x].link) set_step(x, t, cur);
  if (x == -1) {
    st_[cur].link = 0;
  } else if (const int32_t q = step(x, t); st_[x].len + 1 == st_[q].len) {
    st_[cur].link = q;
  } else {
    // q also holds longer strings that do not end here: its shorter strings move to a clone,
    // which inherits q's end positions (the current one is added by note_end).
    const int32_t clone = static_cast<int32_t>(st_.size());
    State c = st_[q];
    c.len = st_[x].len + 1;
    st_.push_back(std::move(c));
    for (; x != -1 && step(x, t) == q; x = st_[x].link) set_step(x, t, clone);
    st_[q].link = st_[cur].link = clone;
    split_ = q;
    clone_ = clone;
  }
  last_ = cur;
  return cur;
}

void SuffixIndex::note_end(int32_t s, int64_t pos) {
  auto& r = st_[s].recent;
  if (!r.empty() && r.front() == pos) return;
  r.insert(r.begin(), pos);
  if (static_cast<int64_t>(r.size()) > n_recent_) r.pop_back();
}

void SuffixIndex::append(TokenId t) {
  text_.push_back(t);
  const int64_t pos = static_cast<int64_t>(text_.size()) - 1;
  // The state of y = the previous capped suffix minus its first token, found before extending
  // (y·t is the new capped suffix when the text is longer than max_match).
  const bool full = pos + 1 > max_match_;
  int32_t y = capped_;
  int64_t y_len = max_match_ - 1;
  if (full && st_[st_[y].link].len >= y_len) y = st_[y].link;
  const int32_t cur = extend(t);
  if (!full) {
    capped_ = cur;
  } else {
    if (y == split_ && y_len <= st_[clone_].len) y = clone_;  // extend() moved y into the clone
    capped_ = step(y, t);
  }
  // Every state from the capped suffix down to the root gains this end position; states
  // below it (longer strings only) are never queried.
  for (int32_t s = capped_; s > 0; s = st_[s].link) note_end(s, pos);
}

std::vector<int64_t> SuffixIndex::earlier_ends(int64_t min_match, int64_t width) const {
  std::vector<int64_t> ends;
  const int64_t n = static_cast<int64_t>(text_.size());
  if (n < 2) return ends;
  // link(last) holds the longest suffix that also ends earlier; past max_match, the capped
  // state holds the longest one we may use.
  const int64_t longest = st_[st_[last_].link].len;
  int32_t s = longest >= max_match_ ? capped_ : st_[last_].link;
  int64_t match = std::min(longest, max_match_);
  for (; s > 0 && match >= min_match; s = st_[s].link, match = st_[s].len) {
    for (int64_t e : st_[s].recent) {
      if (e == n - 1 || std::find(ends.begin(), ends.end(), e) != ends.end()) continue;
      ends.push_back(e);
      if (static_cast<int64_t>(ends.size()) == width) return ends;
    }
  }
  return ends;
}

// Merges the continuations text[e+1 ..] (at most max_depth tokens each) into a trie, in the
// order given; a trie without branches is returned as a chain.
DraftProposal continuation_trie(const Tokens& text, const std::vector<int64_t>& ends, int64_t max_depth) {
  DraftProposal out;
  const int64_t n = static_cast<int64_t>(text.size());
  for (int64_t e : ends) {
    int32_t parent = -1;
    for (int64_t i = e + 1; i < std::min(n, e + 1 + max_depth); ++i) {
      int32_t child = -1;
      for (int32_t j = 0; j < static_cast<int32_t>(out.tokens.size()) && child < 0; ++j)
        if (out.parents[j] == parent && out.tokens[j] == text[i]) child = j;
      if (child < 0) {
        child = static_cast<int32_t>(out.tokens.size());
        out.tokens.push_back(text[i]);
        out.parents.push_back(parent);  // appended after its parent: topological order
      }
      parent = child;
    }
  }
  bool chain = true;
  for (size_t j = 0; j < out.parents.size(); ++j) chain = chain && out.parents[j] == int32_t(j) - 1;
  if (chain) out.parents.clear();
  return out;
}

class SuffixDrafter : public Drafter {
 public:
  SuffixDrafter(int64_t min_match, int64_t max_match, int64_t width, DraftGrammar grammar)
      : min_match_(min_match), width_(width), index_(max_match, width + 1), grammar_(std::move(grammar)) {}

  void prefill(const Tokens& tokens, const at::Tensor&) override { sync(tokens); }

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    if (max_depth <= 0) return {};
    sync(seq);
    DraftProposal out = continuation_trie(index_.text(), index_.earlier_ends(min_match_, width_), max_depth);
    keep_admitted(out, grammar_, seq);  // structured output: without the branches the grammar refuses
    return out;
  }

 private:
  // Committed tokens only grow during a generation, so the index appends the new ones; a
  // sequence that does not extend the indexed one (a reused drafter) is indexed afresh.
  void sync(const Tokens& seq) {
    const Tokens& have = index_.text();
    if (seq.size() < have.size() || (!have.empty() && seq[have.size() - 1] != have.back())) index_.clear();
    for (size_t i = index_.text().size(); i < seq.size(); ++i) index_.append(seq[i]);
  }

  int64_t min_match_, width_;
  SuffixIndex index_;
  DraftGrammar grammar_;
};

struct SuffixParams {
  int64_t min_match = 0, max_match = 0, tree_width = 0;
};

void check_suffix_params(SuffixParams& p) {
  const int64_t lo = p.min_match, hi = p.max_match, width = p.tree_width;
  SD_CHECK(lo >= 1 && hi >= lo && hi <= k_max_suffix_match,
           "drafter suffix: need 1 <= suffix_min_match <= suffix_max_match <= ", k_max_suffix_match,
           ", got suffix_min_match=", lo, " suffix_max_match=", hi);
  SD_CHECK(width >= 1 && width <= k_max_tree_width, "drafter suffix: suffix_tree_width must be in [1, ",
           k_max_tree_width, "], got ", width);
}

ParamTable<SuffixParams> suffix_params() {
  using S = SuffixParams;
  return ParamTable<S>()
      .field("suffix_min_match", &S::min_match, "1", "shortest earlier match (tokens) the suffix drafter uses")
      .field("suffix_max_match", &S::max_match, "32", "longest match the suffix drafter looks for (caps per-token work)")
      .field("suffix_tree_width", &S::tree_width, "1",
             "earlier occurrences whose continuations form the draft (> 1: a trie)")
      .finish(check_suffix_params);
}

}  // namespace

DrafterInfo suffix_drafter_info() {
  DrafterInfo info;
  info.name = "suffix";
  info.description =
      "retrieval over prompt + output: continues the longest earlier match found by a suffix automaton";
  declare_params(info, suffix_params());
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    const SuffixParams& p = ctx.params.typed<SuffixParams>();
    return std::make_unique<SuffixDrafter>(p.min_match, p.max_match, p.tree_width, draft_grammar(ctx));
  };
  return info;
}

}  // namespace specdec::strategies
