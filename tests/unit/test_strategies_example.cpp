// The worked examples of docs/adding.md, reached as a user reaches them:
// through the registries (the CLI runs are in tests/integration/test_cli_extensions_smollm2.cpp
// and, on a crafted GGUF, in tests/unit/test_bad_inputs.cpp).
//  - annealed: a strategy (examples/annealed_sampling.cpp);
//  - repeat_last: a drafter (examples/repeat_last_drafter.cpp).
// They are built outside the product library (examples/CMakeLists.txt) and registered in this
// executable as a user registers theirs (tests/support/examples_main.cpp, examples/register.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/tiny.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"

using namespace specdec;
using namespace specdec::strategies;

namespace {

Params P(std::map<std::string, std::string> values) { return Params(std::move(values)); }

Request tiny_request(int64_t max_new) {
  Request req;
  req.prompt = {1, 2, 3};
  req.target = model::make_tiny_llama(model::tiny_llama_config(), 5);
  req.stop.max_new_tokens = max_new;
  req.seed = 3;
  return req;
}

TEST(ExampleStrategy, AnnealedIsRegisteredWithItsParameters) {
  const StrategyInfo& info = find("annealed");
  EXPECT_EQ(info.params.size(), 2u);
  const Params p = resolve("annealed", P({{"t_end", "0.1"}}));
  EXPECT_DOUBLE_EQ(p.get_float("t_start"), 1.2);  // default filled by the registry
  EXPECT_DOUBLE_EQ(p.get_float("t_end"), 0.1);
  EXPECT_FALSE(strategy_needs("annealed", p, false).draft_model);
  EXPECT_THROW(resolve("annealed", P({{"t_middle", "1"}})), Error);  // unknown key
  EXPECT_THROW(create("annealed", P({{"t_start", "-1"}})), Error);   // checked at creation
}

TEST(ExampleStrategy, AnnealedSamplingRunsAndIsSeeded) {
  const Request req = tiny_request(20);
  const Params p = P({{"t_start", "1.5"}, {"t_end", "0.0"}});
  auto a = create("annealed", p)->generate(req, {});
  auto b = create("annealed", p)->generate(req, {});
  EXPECT_EQ(a.tokens.size(), 20u);
  EXPECT_EQ(a.tokens, b.tokens);
  // The last token is drawn at temperature 0: it must be the target's arg-max there.
  Request g = req;
  g.prompt.insert(g.prompt.end(), a.tokens.begin(), a.tokens.end() - 1);
  g.stop.max_new_tokens = 1;
  EXPECT_EQ(create("greedy", {})->generate(g, {}).tokens.back(), a.tokens.back());
}

TEST(ExampleDrafter, RepeatLastProposesTheRunningToken) {
  const DrafterInfo& info = find_drafter("repeat_last");
  EXPECT_FALSE(info.needs_draft_model);
  Request req;
  const Params p = resolve("speculative", P({{"drafter", "repeat_last"}, {"repeat_min_run", "3"}}));
  const sampling::ProcessorConfig proc = processor_config(p);
  Rng rng(0);
  auto d = make_drafter(resolve_drafter_name(p, false), DrafterContext{req, p, proc, rng, 64, 8});
  EXPECT_FALSE(d->has_distribution());
  EXPECT_TRUE(d->propose({4, 9, 9}, 4).tokens.empty());  // a run of 2 < repeat_min_run
  EXPECT_EQ(d->propose({4, 9, 9, 9}, 4).tokens, (Tokens{9, 9, 9, 9}));
  EXPECT_TRUE(d->propose({4, 9, 9, 9}, 4).is_chain());
  EXPECT_TRUE(d->propose({9, 9, 9}, 0).tokens.empty());
  EXPECT_THROW(create("speculative", P({{"drafter", "repeat_last"}, {"repeat_min_run", "0"}})), Error);
}

TEST(ExampleDrafter, GreedySpeculativeWithRepeatLastEqualsGreedy) {
  const Request req = tiny_request(32);
  const Result base = create("greedy", {})->generate(req, {});
  for (const char* run : {"1", "2"}) {
    const Result spec =
        create("speculative", P({{"drafter", "repeat_last"}, {"temperature", "0"}, {"repeat_min_run", run}}))
            ->generate(req, {});
    EXPECT_EQ(spec.tokens, base.tokens) << run;
    EXPECT_EQ(strategy_needs("speculative", resolve("speculative", P({{"drafter", "repeat_last"}})), false).drafter,
              "repeat_last");
  }
}

}  // namespace
