// Losslessness across combinations on tiny random models, through the registry as a user reaches
// it: every drafter x verify mode x logits-processor set at temperature 0 equals greedy with the
// same processors (alone and in a batch); each target row is processed after the committed
// text + its own root-to-node path; verify=block with a proposal it cannot serve is a named
// error, and every round reports the kernel mode that verified it.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "sampling/processors.h"
#include "strategies/batch.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tests/support/drafter_rig.h"
#include "tests/support/fresh_heads.h"

using namespace specdec;
using namespace specdec::strategies;

namespace test_strategies_lossless {  // this file's own names (its tests compile in a batch with others)

using test_support::error_of;
using test_support::P;
using test_support::tiny;

using Values = std::map<std::string, std::string>;

// The processor sets of the equality matrix (temperature 0 in all of them).
const std::vector<std::pair<std::string, Values>>& processor_sets() {
  static const std::vector<std::pair<std::string, Values>> sets = {
      {"none", {}},
      {"repetition penalty", {{"repetition_penalty", "1.5"}}},
      {"penalty + top-k", {{"repetition_penalty", "1.3"}, {"top_k", "3"}}},
      {"min-p", {{"min_p", "0.2"}}},
  };
  return sets;
}

Values with(Values v, const Values& more) {
  for (const auto& [k, x] : more) v[k] = x;
  return v;
}

// A repetitive prompt: the repetition penalty matters, and the retrieval drafters find matches.
Request tiny_request(int64_t max_new) {
  Request req;
  req.prompt = {1, 5, 9, 5, 9, 3, 1, 5, 9, 5, 9, 3, 1, 5};
  req.target = tiny(11);
  req.stop.max_new_tokens = max_new;
  return req;
}

// Drafter settings that make every drafter propose something on a tiny model (trees: several
// children per node, so that siblings' paths differ).
Values drafter_values(const std::string& name) {
  Values v = {{"temperature", "0"}, {"drafter", name}, {"repeat_min_run", "1"}};
  if (name == "tree") v["tree_branching"] = "3,2,1";
  if (name == "suffix") v["suffix_tree_width"] = "3";
  return v;
}

// The kernel modes that verified a generation's rounds, comma-separated.
std::string modes(const Stats& st) {
  std::string out;
  for (const auto& [mode, n] : st.verify_mode_rounds) out += (out.empty() ? "" : ",") + mode;
  return out;
}

TEST(Lossless, EveryDrafterVerifyModeAndProcessorSetAtTemperatureZeroEqualsGreedy) {
  for (const auto& [set_name, set] : processor_sets()) {
    Request req = tiny_request(32);
    const Result base = create("greedy", P(set))->generate(req, {});
    ASSERT_EQ(base.tokens.size(), 32u) << set_name;
    for (const auto& d : all_drafters())
      for (const char* verify : {"tokenwise", "block"}) {
        Request r = req;
        if (d.needs_draft_model) r.draft = tiny(12);
        const Values v = with(with(with(drafter_values(d.name), set), {{"verify", verify}}),
                              test_support::fresh_head_values(d, *r.target));
        const Result spec = create("speculative", P(v))->generate(r, {});
        const std::string what = set_name + ", drafter " + d.name + ", verify " + verify;
        EXPECT_EQ(spec.tokens, base.tokens) << what;
        EXPECT_GT(spec.stats.n_drafted, 0) << what;
        // At temperature 0 every verify mode is greedy verification, and is reported as such
        // (rounds without a draft are plain steps, verified by no kernel).
        EXPECT_EQ(modes(spec.stats), "greedy") << what;
      }
  }
}

TEST(Lossless, BatchedTreesWithTheRepetitionPenaltyEqualGreedy) {
  // The batch path processes its rows through the same call: two sequences, trees, penalty.
  std::vector<Request> reqs = {tiny_request(48), tiny_request(40)};
  reqs[1].prompt = {2, 7, 2, 7, 4, 2, 7};
  for (Request& r : reqs) r.draft = tiny(12);
  const Values set = {{"repetition_penalty", "3"}};
  for (const char* drafter : {"tree", "suffix", "recycling", "lookahead"}) {
    BatchOptions opt;
    opt.batch_size = 2;
    const std::vector<Result> got =
        create("speculative", P(with(drafter_values(drafter), set)))->generate_batch(reqs, opt, {});
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i].tokens, create("greedy", P(set))->generate(reqs[i], {}).tokens) << drafter << " request " << i;
  }
}

// Node j's root-to-node path, root first.
Tokens path_to(const Tokens& tokens, const std::vector<int32_t>& parents, int64_t node) {
  Tokens path;
  for (int64_t a = node; a >= 0; a = parents.empty() ? a - 1 : parents[a]) path.insert(path.begin(), tokens[a]);
  return path;
}

TEST(Lossless, EachRowIsProcessedAfterTheCommittedTextAndItsOwnPath) {
  // probabilities() of a whole tree (or chain) equals, row by row, probabilities() of that row
  // alone with the context plain decoding would have there: committed + the row's path.
  Rng rng(5);
  const int64_t V = 12;
  const Tokens context = {3, 4, 3};
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng.next() % 8);
    Tokens tokens(n);
    std::vector<int32_t> parents(n);
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<TokenId>(rng.next() % 6);  // small ids: repeats along paths
      parents[i] = static_cast<int32_t>(rng.next() % (i + 1)) - 1;
    }
    if (trial % 4 == 0) parents.clear();  // a chain
    const at::Tensor logits = at::randn({n + 1, V}, at::TensorOptions().dtype(at::kFloat));
    for (const auto& [name, set] : processor_sets()) {
      const sampling::ProcessorConfig cfg = processor_config(resolve("sampling", P(with(set, {{"temperature", "0.8"}}))));
      const at::Tensor all = sampling::probabilities(logits, cfg, context, tokens, parents);
      for (int64_t r = 0; r <= n; ++r) {
        Tokens ctx = context;
        if (r > 0) for (TokenId t : path_to(tokens, parents, r - 1)) ctx.push_back(t);
        const at::Tensor one = sampling::probabilities(logits.narrow(0, r, 1), cfg, ctx);
        EXPECT_TRUE(at::equal(all[r], one[0])) << name << " trial " << trial << " row " << r;
      }
    }
  }
}

TEST(Lossless, BlockVerificationOfAProposalItCannotServeIsANamedError) {
  Request req = tiny_request(16);
  req.draft = tiny(12);
  // At temperature > 0 a drafter without chains with q is refused by name when the strategy is
  // created (before any model: `specdec validate`), listing the drafters that serve...
  for (const char* drafter : {"ngram", "tree"}) {
    const Values v = with(drafter_values(drafter), {{"temperature", "0.8"}, {"verify", "block"}});
    const std::string msg = error_of([&] { create("speculative", P(v)); });
    EXPECT_NE(msg.find("verify=block serves chains with a draft distribution"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("drafter '") + drafter + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("chains with q: model, layer_skip"), std::string::npos) << msg;
    EXPECT_NE(msg.find("verify=tokenwise"), std::string::npos) << msg;
  }
  // ...and `auto` (here ngram: no draft model) by the round that proposed a chain without q.
  Request no_draft = req;
  no_draft.draft = nullptr;
  const std::string msg = error_of([&] {
    create("speculative", P({{"temperature", "0.8"}, {"verify", "block"}}))->generate(no_draft, {});
  });
  EXPECT_NE(msg.find("drafter 'ngram' proposed a chain without q"), std::string::npos) << msg;
  // ...while a draft model's chain is block-verified, and says so.
  const Request& r = req;
  const Result ok = create("speculative", P({{"temperature", "0.8"}, {"verify", "block"}, {"drafter", "model"}}))
                        ->generate(r, {});
  EXPECT_EQ(modes(ok.stats), "block") << ok.stats.n_rounds;
  const Result tw = create("speculative", P({{"temperature", "0.8"}, {"drafter", "tree"}, {"tree_branching", "2,1"},
                                           {"tree_budget", "0"}}))
                        ->generate(r, {});
  EXPECT_EQ(modes(tw.stats), "sampling");
}

}  // namespace test_strategies_lossless
