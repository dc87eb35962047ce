#pragma once
// Structured output (issue 57): a grammar constraint on the target's rows, on xgrammar's C++
// core (scripts/fetch_xgrammar.sh builds it; it is linked into this library only).
//
// The constraint is a logits processor with state. Its mask comes FIRST in the chain: tokens
// the grammar does not admit get -inf before the repetition penalty (-inf stays -inf there),
// temperature, top-k, top-p and min-p, so they have probability 0 and a non-empty admissible
// set always keeps a token. The constrained target's law is what sampling gives after that
// chain; speculative decoding reproduces it because every target row gets the mask of ITS OWN
// path: row 0 after the committed text, row j + 1 after it and the root-to-node path of draft
// node j (chains and trees), walked with AcceptToken, masked, rolled back.
//
// Keys (strategy parameters of greedy, sampling and speculative; at most one set):
//   json_schema      a JSON Schema: inline JSON, or the path of a file holding it
//   regex            a regular expression the whole output must match
//   grammar          an EBNF/GBNF grammar (xgrammar's dialect, root rule `root`): inline or a file
//   response_format  `json` (any JSON value) or `text` (no constraint)
// A bad value is a specdec::Error naming the key (and the file, for a schema or grammar file) and
// carrying xgrammar's message (with the grammar's line and column where it gives them) without
// xgrammar's own time and source-path prefix; a language with no string (nothing can start or
// end it) is an error too. Not detected: a grammar whose strings never end (root ::= "a" root).
// Generation ends when the grammar is complete: the mask then admits only the end-of-sequence
// ids (the request's eos_ids), so the result finishes with `eos`; a structure cut by
// max_new_tokens finishes with `length`.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/types.h"

namespace specdec::tokenizer { class Tokenizer; }

namespace specdec::sampling {

struct ProcessorConfig;

class ConstraintState;

// The user's constraint, parsed once (errors come here, before any model is loaded; the
// strategies' resolved params carry the parsed value on, strategies::Params::constraint) and
// compiled for a vocabulary on first use (once per tokenizer; thread-safe).
class Constraint {
 public:
  // The keys in the order they are documented: json_schema, regex, grammar, response_format.
  static const std::vector<std::string>& keys();
  // From a strategy's parameters (name -> value); null when none of keys() is set to a value
  // that constrains ("" everywhere, or response_format=text). Two set: a named error.
  // `parsed`: a constraint parsed before (the params' previous resolve); returned as it is when
  // the params set its key to the same value, so that resolving again parses nothing again.
  static std::shared_ptr<const Constraint> from_params(const std::map<std::string, std::string>& params,
                                                       const std::shared_ptr<const Constraint>& parsed = nullptr);
  // One key and its value (inline text, or a file path for json_schema and grammar).
  static std::shared_ptr<const Constraint> parse(const std::string& key, const std::string& value);

  const std::string& key() const;
  // How many grammars this process has compiled to check that their language is not empty
  // (parse() does, once per key and text: the same constraint parsed again reuses the answer).
  static int64_t emptiness_probes();
  // A matcher for one sequence starting after `prompt`, for this tokenizer (vocabulary as its
  // token_bytes; special ids never admitted) with `eos_ids` as the ids that end the grammar
  // (empty: the tokenizer's eos_ids()).
  // tok null (a model without a tokenizer): a named error. The grammar is compiled by the
  // first mask(), when the logits' width is known (it may exceed the tokenizer's: padding ids
  // are never admitted).
  std::shared_ptr<ConstraintState> start(const tokenizer::Tokenizer* tok, const Tokens& prompt,
                                         const std::vector<TokenId>& eos_ids) const;
  // Compiles the grammar for this tokenizer, logits width and end ids now, into the process-wide
  // cache that mask() reads, so that a timed generation does not pay for it (the harness calls
  // it before each generation's clock starts: otherwise whichever ran first on a prompt, usually
  // the baseline, paid ~10 ms a token for SmolLM2's JSON schemas).
  void compile(const tokenizer::Tokenizer* tok, int64_t n_vocab, const std::vector<TokenId>& eos_ids) const;
  // Whether `output` (the tokens generated after a prompt) is a whole string of the language:
  // every token admitted in turn and the grammar complete at the end (an end id may close it).
  // A structure cut off (max_new_tokens) is not. n_vocab: the logits' width, as for mask().
  bool matches(const tokenizer::Tokenizer* tok, int64_t n_vocab, const Tokens& output,
               const std::vector<TokenId>& eos_ids) const;

  struct Impl;

 private:
  explicit Constraint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// One sequence's matcher. It follows the committed text itself: each call accepts the tokens
// that `context` holds beyond what it has accepted (context = the prompt it started after +
// the tokens committed since; it never shrinks).
class ConstraintState {
 public:
  ~ConstraintState();
  // logits [N, V] float (any device), in place: -inf where the grammar does not admit the token.
  // Row 0 after `context`, row i > 0 after context + the root-to-node path of draft node i - 1
  // (parents[j]: node j's parent, -1 = the context; empty: a chain). A row whose path leaves
  // the grammar (a draft token it does not admit, or a token after the end) is left as it is:
  // the verifier never reaches it, since its parent row gives that token probability 0.
  // Returns how many draft nodes the grammar refuses where they stand (after context and their
  // parent's path, which it admits): tokens their parent's masked row gives probability 0.
  // `argmax` (T = 0: the caller takes each row's arg-max under these processors, as
  // greedy_token does, and nothing else from it): a row whose processed arg-max, unmasked, the
  // grammar admits is left whole, since the mask would leave that token its arg-max (ties
  // included: it is the first of the row's maxima). Only the other rows pay for a mask, as
  // llama.cpp's sampler checks its pick before it applies the grammar. Rows not on the host in
  // float, and end ids, take the mask.
  int64_t mask(const at::Tensor& logits, const Tokens& context, const Tokens& draft = {},
               const std::vector<int32_t>& parents = {}, const ProcessorConfig* argmax = nullptr);
  // What the grammar lays down after `context` for a round's draft to start with (issue 57,
  // item 5), at most `max` tokens in all; what follows `context` is left as it was. n_vocab: the
  // logits' width, as for mask().
  //  - forced (`forced`): the one token the grammar admits there, then the one it admits after
  //    that, and so on; it stops where it admits several, or only an end id (the target's own
  //    next token then). The masked target puts all its mass on each of them, so a round drafts
  //    them for free and every verify mode accepts them.
  //  - jump (`jump`): then xgrammar's jump-forward string from there (the longest text every
  //    continuation of the grammar starts with, cut to whole UTF-8 characters), tokenised as the
  //    tokenizer tokenises text, up to the first token the grammar refuses after the ones before
  //    it. The target may emit another tokenisation of that text (or a token reaching beyond
  //    it), so these are a draft like any other, verified, not assumed.
  // With `forced` off, a jump starts at `context` and covers what would have been forced.
  // speculative/proposer.h: prepend_forced makes them the round's draft's first tokens.
  struct Lead {
    Tokens tokens;          // the forced tokens, then the jump's
    int64_t n_forced = 0;   // how many of `tokens` are forced (the rest: the jump's)
  };
  Lead lead(const Tokens& context, int64_t n_vocab, int64_t max, bool forced, bool jump);
  // The same lead after a drafter's path (a draft chain reaching the grammar's skeleton:
  // speculative/drafters/model.cpp, draft_lead), for a state of the drafter's own as
  // mask_draft()'s: it follows `path` (rolling back past its common prefix with it) instead of
  // extending a committed sequence. Nothing where `path` leaves the grammar or has ended.
  Lead lead_along(const Tokens& path, int64_t n_vocab, int64_t max, bool forced, bool jump);
  // A drafter's own row (issue 57, item 4): masks `row` ([V] or [1, V], any device, in place)
  // after `path`, the prompt this state started after and any tokens after it, committed or not
  // (a drafter's sequence and its draft so far). Meant for a state of the drafter's own, which
  // follows its draft: what it accepted beyond `path`'s common prefix with them is rolled back,
  // the rest of `path` accepted. Returns false, the row left as it is, where `path` leaves the
  // grammar (a token it refuses, or anything after an end id) or has ended, as mask() leaves
  // such rows. A drafter draws from the processed masked row, so its q is the law it drew from.
  bool mask_draft(const at::Tensor& row, const Tokens& path);
  // Which draft nodes the grammar admits (issue 57, item 4: a lookup drafter's proposal cut to
  // them): node i is admitted when its parent is (or it follows `context`) and its token is
  // admitted after context + the parent's root-to-node path (an end id where the grammar is
  // complete; nothing after an end id). parents as mask()'s (empty: a chain). n_vocab: the
  // logits' width, as for mask(). A state of the drafter's own, as mask_draft()'s.
  std::vector<bool> admitted(const Tokens& context, const Tokens& draft, const std::vector<int32_t>& parents,
                             int64_t n_vocab);
  // The grammar has accepted an end-of-sequence id.
  bool terminated() const;
  // Tokens accepted so far after the prompt.
  int64_t n_accepted() const;

  struct Impl;
  explicit ConstraintState(std::unique_ptr<Impl> impl);

 private:
  friend class Constraint;  // matches() walks a state of its own
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::sampling
