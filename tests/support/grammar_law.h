#pragma once
// The exact law of speculative decoding under a grammar (issue 57), written once for two test
// programs: tests/unit/test_sampling_grammar.cpp (every verify mode, the real mask on every
// row) and tests/unit/test_strategies_grammar_forced_tiny.cpp (forced tokens drafted first, the
// real speculative/proposer.h: prepend_forced). A seven-token vocabulary, the language (ab|c)+
// through the regex and the EBNF key, an automaton of it written by hand (independent of
// xgrammar) for the true target's masks. Tests only.
#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sampling/grammar.h"
#include "tests/reference/exact_law.h"
#include "tokenizer/tokenizer.h"

namespace specdec::testing_support::grammar_law {

namespace ref = specdec::reference;
using sampling::Constraint;

// id: 0 "<eos>" (special, the end id), 1 "a", 2 "b", 3 "c", 4 "ab", 5 "x", 6 "<pad>" (special)
class TinyTokenizer : public tokenizer::Tokenizer {
 public:
  // Longest match first, left to right ("abc": ab, c); a byte no token starts with ends it.
  Tokens encode(const std::string& text, bool) const override {
    Tokens out;
    for (size_t at = 0; at < text.size();) {
      TokenId best = -1;
      for (TokenId id = 0; id < vocab_size(); ++id)
        if (!is_special(id) && text.compare(at, strings_[id].size(), strings_[id]) == 0 &&
            (best < 0 || strings_[id].size() > strings_[best].size()))
          best = id;
      if (best < 0) break;
      out.push_back(best);
      at += strings_[best].size();
    }
    return out;
  }
  std::string decode(const Tokens& ids, bool) const override {
    std::string s;
    for (TokenId t : ids) s += token_bytes(t);
    return s;
  }
  std::string token_bytes(TokenId id) const override { return is_special(id) ? "" : strings_[id]; }
  const std::string& token_string(TokenId id) const override { return strings_[id]; }
  int64_t vocab_size() const override { return static_cast<int64_t>(strings_.size()); }
  TokenId bos_id() const override { return -1; }
  std::vector<TokenId> eos_ids() const override { return {0}; }
  bool is_special(TokenId id) const override { return id == 0 || id == 6; }
  std::string apply_chat_template(const std::vector<tokenizer::ChatMessage>&, bool) const override { return ""; }

 private:
  std::vector<std::string> strings_ = {"<eos>", "a", "b", "c", "ab", "x", "<pad>"};
};



inline constexpr int kLawV = 7;  // the tokenizer's ids, no padding: the toy models' width

// The text of each id for the automaton (0 "<eos>" and 6 "<pad>" are special: none).
inline const char* const kText[kLawV] = {"", "a", "b", "c", "ab", "x", ""};

// (ab|c)+ by hand, independent of xgrammar: 0 start, 1 complete (after "ab" or "c"), 2 after
// "a"; -1 off the language. Special ids have no text and are never admitted.
inline int walk(int state, int id) {
  if (id == 0 || id == 6) return -1;
  for (const char* ch = kText[id]; *ch && state >= 0; ++ch)
    state = *ch == 'a' && state != 2 ? 2 : *ch == 'b' && state == 2 ? 1 : *ch == 'c' && state != 2 ? 1 : -1;
  return state;
}

// The ids the language admits after `generated`: the end id where it is complete. A text off
// the language (or past the end id) admits every id, as the implementation leaves such rows
// (the true law never reaches one).
inline ref::Mask automaton_admits(const ref::Tokens& generated) {
  int state = 0;
  for (int t : generated)
    if ((state = walk(state, t)) < 0) return ref::Mask(kLawV, true);
  ref::Mask m(kLawV);
  for (int v = 0; v < kLawV; ++v) m[v] = v == 0 ? state == 1 : walk(state, v) >= 0;
  return m;
}

// The real Constraint's masks of a round's rows, asked as SpecLoop::verify asks: the committed
// text, the whole draft and its parents, one matcher across every round of the enumeration.
inline std::function<std::vector<ref::Mask>(const ref::Tokens&, const std::vector<int>&)> real_masks(
    std::shared_ptr<sampling::ConstraintState> state, const Tokens& context) {
  return [state, context](const ref::Tokens& draft, const std::vector<int>& parents) {
    at::Tensor logits = at::zeros({static_cast<int64_t>(draft.size()) + 1, kLawV});
    state->mask(logits, context, Tokens(draft.begin(), draft.end()),
                std::vector<int32_t>(parents.begin(), parents.end()));
    std::vector<ref::Mask> out(draft.size() + 1, ref::Mask(kLawV));
    const auto a = logits.accessor<float, 2>();
    for (size_t r = 0; r < out.size(); ++r)
      for (int v = 0; v < kLawV; ++v) out[r][v] = !std::isinf(a[r][v]);
    return out;
  };
}


struct GrammarLawCase {
  std::string label;
  ref::Setup setup;
  ref::Mode mode;
  int gamma = 0;             // chain length (parents empty)
  std::vector<int> parents;  // a tree
  int length = 0;            // L = max depth + 1
  Tokens forced;             // the grammar's forced tokens, drafted before the drafter's (forced_round)
};

inline const char* law_mode_name(ref::Mode m) {
  return m == ref::Mode::greedy ? "greedy" : m == ref::Mode::sampling ? "sampling" : m == ref::Mode::tokens_only ? "tokens_only" : "block";
}

// Every processor chain (the even ones through the regex key, the odd ones through the EBNF
// key, the same language) x every chain mode, gamma 1..3, and tree mode, shapes [2], [3], [2,1].
// The target has no -inf logits of its own (a row the mask leaves a single token keeps it); the
// draft is unmasked, as in the loop: it drafts tokens off the grammar (x, <pad>, the end id too
// early), which the masked target rejects.
//
// forced: the output so far is "a", after which the grammar admits "b" only: the round drafts
// it first (ConstraintState::forced, prepend_forced), the drafter's draft after it.
inline std::vector<GrammarLawCase> grammar_law_cases(uint64_t seed, bool forced = false) {
  static const TinyTokenizer tok;
  const Tokens prompt = {5, 1, 2};  // "x", "a", "b": the penalty sees grammar tokens before the output
  const Tokens committed = forced ? Tokens{5, 1, 2, 1} : prompt;
  std::vector<GrammarLawCase> cases;
  const std::vector<ref::Processors>& chains = ref::processor_chains();  // after the mask
  for (size_t k = 0; k < chains.size(); ++k) {
    const bool regex = k % 2 == 0;
    ref::Setup s{{seed * 7 + 3, kLawV, /*zeros=*/false}, {seed * 13 + 1000, kLawV}, chains[k],
                 ref::Tokens(committed.begin(), committed.end()), ref::Plant::none};
    s.eos = 0;
    s.admits = [n = prompt.size()](const ref::Tokens& text) {
      return automaton_admits(ref::Tokens(text.begin() + static_cast<std::ptrdiff_t>(n), text.end()));
    };
    const auto c = regex ? Constraint::parse("regex", "(ab|c)+") : Constraint::parse("grammar", "root ::= (\"ab\" | \"c\")+");
    const auto state = c->start(&tok, prompt, {0});
    s.round_masks = real_masks(state, committed);
    const Tokens f = forced ? state->lead(committed, kLawV, 8, /*forced=*/true, /*jump=*/false).tokens : Tokens();
    const int m = static_cast<int>(f.size());
    const std::string head = std::string(regex ? "regex, " : "grammar, ") + chains[k].name + ", ";
    for (ref::Mode mode : {ref::Mode::greedy, ref::Mode::sampling, ref::Mode::tokens_only, ref::Mode::block})
      for (int g = 1; g <= 3; ++g)
        cases.push_back({head + law_mode_name(mode) + " chain, gamma " + std::to_string(g), s, mode, g, {}, m + g + 1, f});
    for (ref::Mode mode : {ref::Mode::greedy, ref::Mode::sampling, ref::Mode::tokens_only})
      for (const std::vector<int>& shape : {std::vector<int>{2}, {3}, {2, 1}})
        cases.push_back({head + law_mode_name(mode) + " tree of " + std::to_string(ref::tree_parents(shape).size()) +
                             " nodes, depth " + std::to_string(shape.size()),
                         s, mode, 0, ref::tree_parents(shape), m + static_cast<int>(shape.size()) + 1, f});
  }
  return cases;
}

// The law of one case's round, completed and compared with the constrained target's: the
// reference's chain or tree round, or `round` where given (a round drafted otherwise).
using CaseRound = std::function<ref::RoundOutput(ref::Enumerator&, ref::RowCache&, const GrammarLawCase&, ref::Plant)>;
inline ref::RoundLaw grammar_law(const GrammarLawCase& c, ref::Plant plant = ref::Plant::none, const CaseRound& round = {}) {
  ref::Setup s = c.setup;
  s.plant = plant;
  return ref::round_law(s, c.length, c.mode == ref::Mode::greedy, [&](ref::Enumerator& e, ref::RowCache& rows) {
    if (round) return round(e, rows, c, plant);
    return c.parents.empty() ? ref::chain_round(e, rows, c.mode, c.gamma, plant)
                             : ref::tree_round(e, rows, c.mode, c.parents, plant);
  });
}

}  // namespace specdec::testing_support::grammar_law
