#pragma once
// Exact output laws of one round of speculative decoding with the reference verifier, on toy
// context-dependent "language models" (tests only; std only).
//
// A toy model's logits are a deterministic function of the whole context (hashed), taking a few
// quantised values (so argmax ties occur) and -inf in some corners (probability 0). The target
// p and the draft q are two such models with different seeds, both processed by the same chain
// of logits processors. One round: draft from q (a chain of gamma tokens, or a tree whose
// siblings are i.i.d. draws with replacement from their parent's q row), verify with the
// reference, then complete the round's output autoregressively from the target (exactly) to a
// fixed length L = max depth + 1. Enumerating every draft and every branch of the verifier
// gives the exact law of that length-L text, which must equal the target's own law of L tokens.
//
// Structured output (issue 57): a Setup may carry a grammar. The true target's rows are masked
// first with `admits` (the tokens the grammar admits after a text, written independently of the
// code under test); the verifier's rows with the masks the implementation under test gives each
// round (`round_masks`, called once per draft as the round loop calls it). A text ends at the
// grammar's end id (eos): the law compared is that of the first L tokens or up to eos.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "tests/reference/exact_enumeration.h"
#include "tests/reference/reference_processors.h"
#include "tests/reference/reference_verifier.h"

namespace specdec::reference {

using Tokens = std::vector<int>;
using Law = std::map<Tokens, double>;  // text -> probability

struct ToyLm {
  uint64_t seed = 0;
  int vocab = 0;
  bool zeros = true;  // about 1 logit in 8 is -inf (false: none, so a grammar's mask never empties a row)
};

inline uint64_t mix64(uint64_t z) {  // SplitMix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Logits in {-1.5, -1, ..., 1.5} or -inf (about 1 in 8), a function of the whole context.
inline Row toy_logits(const ToyLm& m, const Tokens& context) {
  uint64_t h = mix64(m.seed + 0x9E3779B97F4A7C15ULL);
  for (int t : context) h = mix64(h ^ (static_cast<uint64_t>(t) + 0x51ED27ULL));
  Row logits(m.vocab);
  bool any = false;
  for (int v = 0; v < m.vocab; ++v) {
    const int level = static_cast<int>(mix64(h + static_cast<uint64_t>(v) * 0xD1B54A32D192ED03ULL) % 8);
    logits[v] = level == 0 && m.zeros ? kMinusInf : (level - 4) * 0.5;
    any |= logits[v] != kMinusInf;
  }
  if (!any) logits[h % m.vocab] = 0.0;
  return logits;
}

using Mask = std::vector<bool>;  // admitted[v]

// Everything that defines one round besides the mode and the draft shape.
struct Setup {
  ToyLm target, draft;
  Processors processors;
  Tokens prompt;              // the committed text
  Plant plant = Plant::none;  // handed to the verifier (and penalty_without_path, mask_after_filters to the rows)
  // Structured output (empty: none). admits(prompt + path): the true mask of the row after it.
  // round_masks(draft, parents): the implementation's masks of a round's rows (row 0 after the
  // prompt, row c + 1 after node c's root-to-node path; parents empty: a chain); empty: admits
  // along each path. eos: the end id, where a text ends (-1: none).
  std::function<Mask(const Tokens& text)> admits;
  std::function<std::vector<Mask>(const Tokens& draft, const std::vector<int>& parents)> round_masks;
  int eos = -1;

  // The processed target row after prompt + path, as the verifier gets it (masked with `mask`).
  Row verifier_p(const Tokens& path, const Mask* mask = nullptr) const {
    const Tokens text = with_path(path);
    const Tokens& penalty_context = plant == Plant::penalty_without_path ? prompt : text;
    return process(toy_logits(target, text), penalty_context, processors, mask, plant == Plant::mask_after_filters);
  }
  // The true target row (what plain decoding samples from).
  Row true_p(const Tokens& path) const {
    const Tokens text = with_path(path);
    const Mask mask = admits ? admits(text) : Mask();
    return process(toy_logits(target, text), text, processors, admits ? &mask : nullptr);
  }
  Row q(const Tokens& path) const { return process(toy_logits(draft, with_path(path)), with_path(path), processors); }

  Tokens with_path(const Tokens& path) const {
    Tokens text = prompt;
    text.insert(text.end(), path.begin(), path.end());
    return text;
  }
};

// Rows are pure functions of the path (and of the implementation's mask): memoised, since the
// enumeration replays each round.
class RowCache {
 public:
  explicit RowCache(const Setup& s) : s_(s) {}
  const Setup& setup() const { return s_; }
  // The verifier's row after one path (masked with admits, if any).
  const Row& verifier_p(const Tokens& path) {
    return get(vp_, path, [&] {
      const Mask m = s_.admits ? s_.admits(s_.with_path(path)) : Mask();
      return s_.verifier_p(path, m.empty() ? nullptr : &m);
    });
  }
  // The verifier's rows of one round: row 0 after the prompt, row c + 1 after node c's path
  // (parents empty: a chain), each masked as the Setup says.
  std::vector<Row> verifier_rows(const Tokens& draft, const std::vector<int>& parents) {
    std::vector<Tokens> paths(draft.size() + 1);
    for (size_t c = 0; c < draft.size(); ++c) {
      const int parent = parents.empty() ? static_cast<int>(c) - 1 : parents[c];
      paths[c + 1] = paths[parent + 1];
      paths[c + 1].push_back(draft[c]);
    }
    std::vector<Row> out;
    if (!s_.round_masks) {
      for (const Tokens& path : paths) out.push_back(verifier_p(path));
      return out;
    }
    Tokens key = draft;
    key.push_back(-1);
    key.insert(key.end(), parents.begin(), parents.end());
    const std::vector<Mask>& masks = get(masks_, key, [&] { return s_.round_masks(draft, parents); });
    for (size_t r = 0; r < paths.size(); ++r) {
      Tokens row_key = paths[r];  // the path and its mask (a wrong implementation's may differ by round)
      row_key.push_back(-1);
      row_key.insert(row_key.end(), masks[r].begin(), masks[r].end());
      out.push_back(get(vp_, row_key, [&] { return s_.verifier_p(paths[r], &masks[r]); }));
    }
    return out;
  }
  const Row& true_p(const Tokens& path) {
    return get(tp_, path, [&] { return s_.true_p(path); });
  }
  const Row& q(const Tokens& path) {
    return get(q_, path, [&] { return s_.q(path); });
  }

 private:
  template <class Value, class Make>
  static const Value& get(std::map<Tokens, Value>& m, const Tokens& key, Make make) {
    auto it = m.find(key);
    if (it == m.end()) it = m.emplace(key, make()).first;
    return it->second;
  }
  const Setup& s_;
  std::map<Tokens, Row> vp_, tp_, q_;
  std::map<Tokens, std::vector<Mask>> masks_;
};

struct RoundOutput {
  Tokens tokens;  // accepted tokens and the final token
  int accepted = 0;
};

// One round with a chain of gamma drafted tokens.
inline RoundOutput chain_round(Enumerator& e, RowCache& rows, Mode mode, int gamma, Plant plant) {
  ChainInput in;
  in.final_u = gamma;
  Tokens path;
  for (int i = 0; i < gamma; ++i) {
    in.q.push_back(rows.q(path));
    in.draft.push_back(e.choose(in.q.back()));
    path.push_back(in.draft.back());
  }
  in.p = rows.verifier_rows(in.draft, {});
  EnumerationSource src(e);
  const Outcome o = verify_chain(mode, in, src, plant);
  return {o.tokens, o.accepted};
}

// A full tree, level by level: branching[d] children under every node of depth d. Nodes are
// numbered breadth first, so parents come first and siblings are adjacent.
inline std::vector<int> tree_parents(const std::vector<int>& branching) {
  std::vector<int> parents, level{-1};
  for (int b : branching) {
    std::vector<int> next;
    for (int node : level)
      for (int k = 0; k < b; ++k) next.push_back(static_cast<int>(parents.size())), parents.push_back(node);
    level = next;
  }
  return parents;
}

// One round with a draft tree: every node is drawn from the q row after its parent's path.
inline RoundOutput tree_round(Enumerator& e, RowCache& rows, Mode mode, const std::vector<int>& parents, Plant plant) {
  TreeInput t;
  t.parents = parents;
  t.final_u = static_cast<int>(parents.size());
  std::vector<Tokens> paths(parents.size());
  for (size_t c = 0; c < parents.size(); ++c) {
    const Tokens parent_path = parents[c] < 0 ? Tokens{} : paths[parents[c]];
    t.q.push_back(rows.q(parent_path));
    t.tokens.push_back(e.choose(t.q.back()));
    paths[c] = parent_path;
    paths[c].push_back(t.tokens.back());
  }
  t.p = rows.verifier_rows(t.tokens, parents);
  EnumerationSource src(e);
  const Outcome o = verify_tree(mode, t, src, plant);
  return {o.tokens, o.accepted};
}

// A text cut after its first end id (none: as it is), as generation stops there.
inline Tokens until_eos(const Tokens& text, int eos) {
  const auto it = std::find(text.begin(), text.end(), eos);
  return eos < 0 || it == text.end() ? text : Tokens(text.begin(), it + 1);
}

// Extends every text of `partial` to length L (or its end id) from the true target (greedy:
// its argmax).
inline Law complete(const Law& partial, RowCache& rows, int L, bool greedy) {
  Law done;
  const int eos = rows.setup().eos;
  std::vector<std::pair<Tokens, double>> stack(partial.begin(), partial.end());
  while (!stack.empty()) {
    auto [text, prob] = stack.back();
    stack.pop_back();
    if (static_cast<int>(text.size()) >= L || (eos >= 0 && !text.empty() && text.back() == eos)) {
      done[text] += prob;
      continue;
    }
    const Row& p = rows.true_p(text);
    for (int y = 0; y < static_cast<int>(p.size()); ++y) {
      if (greedy ? y != argmax(p) : !(p[y] > 0.0)) continue;
      Tokens longer = text;
      longer.push_back(y);
      stack.emplace_back(longer, greedy ? prob : prob * p[y]);
    }
  }
  return done;
}

inline double total_variation(const Law& a, const Law& b) {
  double sum = 0.0;
  for (const auto& [text, pa] : a) {
    auto it = b.find(text);
    sum += std::abs(pa - (it == b.end() ? 0.0 : it->second));
  }
  for (const auto& [text, pb] : b)
    if (a.find(text) == a.end()) sum += pb;
  return sum / 2;
}

struct RoundLaw {
  double tv = 0;    // TV(law of the length-L text, the target's law of L tokens)
  double mass = 0;  // total probability of all paths (1 up to rounding)
  double mean_accepted = 0;
  int64_t paths = 0;
  int64_t uniform_reuses = 0;
};

// The exact law of one round (round(e, rows) draws and verifies), completed to length L and
// compared with the target's (greedy: with the target's greedy text, a point mass).
template <class RoundFn>
RoundLaw round_law(const Setup& s, int L, bool greedy, RoundFn round) {
  RowCache rows(s);
  Enumerator e;
  Law partial;
  RoundLaw r;
  r.paths = e.for_each_path([&](Enumerator& en) { return round(en, rows); },
                            [&](const RoundOutput& out, double prob) {
                              partial[until_eos(out.tokens, s.eos)] += prob;
                              r.mass += prob;
                              r.mean_accepted += prob * out.accepted;
                            });
  r.uniform_reuses = e.uniform_reuses;
  r.tv = total_variation(complete(partial, rows, L, greedy), complete(Law{{Tokens{}, 1.0}}, rows, L, greedy));
  return r;
}

}  // namespace specdec::reference
