#pragma once
// The tiny target of the structured-output tests that run the real speculative loop
// (test_strategies_grammar_forced_tiny.cpp, test_strategies_grammar_drafts_tiny.cpp): a tiny
// chat Llama (tests/support/tiny_gguf.h; its end id, <|im_end|>, closes the grammar) that is its
// own draft model, so that at T = 0 every token its drafter proposes is the target's; a JSON
// schema; and a request. Loaded once per test program. Tests only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "model/causal_lm.h"
#include "sampling/grammar.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "strategies/strategy.h"
#include "tests/support/command.h"
#include "tests/support/tiny_gguf.h"
#include "tokenizer/tokenizer.h"

namespace specdec::testing_support::grammar_tiny {

inline constexpr const char* kSchema =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},)"
    R"( "count": {"type": "integer"}, "valid": {"type": "boolean"}}, "required": ["name", "count", "valid"]})";

// The tiny chat Llama of options `o` (chat set here), written as `name` into this process's
// folder and loaded with one thread, on the engine `engine` (empty: the default) with static
// steps `graphs` (empty: the default).
inline model::LoadedModel load_chat_tiny(const std::string& name, specdec::testing::TinyGgufOptions o = {},
                                         const std::string& engine = "", const std::string& graphs = "") {
  static const ProcessDir dir("specdec_grammar_tiny");
  o.chat = true;
  model::ModelSpec spec;
  spec.name = name;
  spec.path = specdec::testing::write_tiny_gguf((dir.path / name).string(), o);
  spec.threads = 1;
  if (!engine.empty()) spec.engine = engine;
  if (!graphs.empty()) spec.graphs = graphs;
  return model::load(spec);
}

inline const model::LoadedModel& target() {
  static const model::LoadedModel loaded = load_chat_tiny("target.gguf");
  return loaded;
}

// `prompt` as a chat turn, 48 new tokens at most, the target (`m`: target()) drafting for itself.
inline strategies::Request request(const std::string& prompt, const model::LoadedModel& m = target()) {
  strategies::Request r;
  r.target = m.model;
  r.tokenizer = m.tokenizer;
  r.draft = r.target;
  r.prompt = r.tokenizer->encode(prompt, true);
  r.stop.eos_ids = r.tokenizer->eos_ids();
  r.stop.max_new_tokens = 48;
  return r;
}

// The strategy parameters `extra` with the schema, at temperature 0 unless `extra` sets one.
inline strategies::Params params(std::map<std::string, std::string> extra = {}) {
  if (!extra.count("temperature")) extra["temperature"] = "0";
  extra["json_schema"] = kSchema;
  return strategies::Params(extra);
}

// Checks that drafter `name` (built through the registry, as the loop builds it, with the
// speculative params `extra` at temperature 1), proposing `gamma` after prefixes of a constrained
// greedy output (`repeats` passes), hands over as q the masked laws it drew from: each row (a
// chain's, or a tree node's) puts no mass on a token the grammar refuses after that node's
// parent's path (an independent matcher's mask, as the loop asks it for the target's rows), sums
// to 1, and gives its drawn token, which the grammar admits, mass > 0. Rows after an end id
// (no grammar there) are skipped. exact_n > 0: each proposal has that many nodes. Returns the
// rows checked.
inline int64_t check_q_is_the_masked_law(const std::string& name, std::map<std::string, std::string> extra,
                                          int64_t gamma, int repeats, int64_t exact_n = 0) {
  const strategies::Request req = request("A person: ");
  const strategies::Result base = strategies::create("greedy", params())->generate(req, {});
  EXPECT_GT(base.tokens.size(), 20u) << base.text;
  extra["temperature"] = "1";
  extra["drafter"] = name;
  const strategies::Params p = strategies::resolve("speculative", params(extra));
  const sampling::ProcessorConfig proc = strategies::processor_config(p);
  Rng rng(7);
  const std::unique_ptr<strategies::Drafter> drafter =
      strategies::make_drafter(name, strategies::DrafterContext{req, p, proc, rng, 512, p.get_int("gamma_max")});
  const auto constraint = sampling::Constraint::parse("json_schema", kSchema);
  const auto is_end = [&](TokenId t) {
    return std::find(req.stop.eos_ids.begin(), req.stop.eos_ids.end(), t) != req.stop.eos_ids.end();
  };
  int64_t rows = 0, refused_mass_rows = 0;
  for (int repeat = 0; repeat < repeats; ++repeat)
    for (size_t cut = 0; cut + 4 < base.tokens.size(); cut += 3) {
      Tokens seq = req.prompt;
      seq.insert(seq.end(), base.tokens.begin(), base.tokens.begin() + static_cast<std::ptrdiff_t>(cut));
      drafter->observe(strategies::Round{static_cast<int64_t>(req.prompt.size()) - 1, {}, {}});  // its cache: the prompt's
      strategies::DraftProposal d = drafter->propose(seq, gamma);
      d.read_drawn(/*synced=*/false);
      const auto N = static_cast<int64_t>(d.tokens.size());
      EXPECT_GT(N, 0) << name << " after " << cut << " tokens";
      if (exact_n > 0) EXPECT_EQ(N, exact_n) << name << " after " << cut << " tokens";
      if (N == 0 || !d.q.defined()) {
        ADD_FAILURE() << name << ": no q after " << cut << " tokens";
        continue;
      }
      EXPECT_EQ(d.q.size(0), N);
      at::Tensor admitted = at::zeros({N + 1, d.q.size(1)});  // -inf: refused after that row's path
      constraint->start(req.tokenizer.get(), req.prompt, req.stop.eos_ids)->mask(admitted, seq, d.tokens, d.parents);
      const at::Tensor q = d.q.to(at::kDouble);
      std::vector<bool> ended(static_cast<size_t>(N), false);  // an end id on the path before the node
      for (int64_t i = 0; i < N; ++i) {
        const int64_t parent = d.parents.empty() ? i - 1 : d.parents[i];
        ended[i] = parent >= 0 && (ended[parent] || is_end(d.tokens[parent]));
        if (ended[i]) continue;
        ++rows;
        const at::Tensor refused = admitted[parent + 1].isinf();
        const double off_mass = q[i].masked_select(refused).sum().item<double>();
        EXPECT_EQ(off_mass, 0.0) << name << " node " << i << " after " << cut << " tokens";
        refused_mass_rows += off_mass > 0;
        EXPECT_NEAR(q[i].sum().item<double>(), 1.0, 1e-5) << name << " node " << i;
        const TokenId t = d.tokens[i];
        EXPECT_FALSE(refused[t].item<bool>()) << name << ": drafted token " << t << " is refused, node " << i;
        EXPECT_GT(q[i][t].item<double>(), 0.0) << name << " node " << i;
      }
    }
  std::printf("  %s: %lld q rows checked, %lld with mass on refused tokens\n", name.c_str(), (long long)rows,
              (long long)refused_mass_rows);
  return rows;
}

}  // namespace specdec::testing_support::grammar_tiny
