// Compiles and runs the worked example of src/strategies/ADDING_A_STRATEGY.md.
#include <gtest/gtest.h>

#include "model/tiny.h"
#include "strategies/examples/annealed_sampling.cpp"

using namespace specdec;
using namespace specdec::strategies;

TEST(ExampleStrategy, AnnealedSamplingRunsAndIsSeeded) {
  const StrategyInfo info = annealed_info();
  EXPECT_EQ(info.name, "annealed");
  Request req;
  req.prompt = {1, 2, 3};
  req.target = model::make_tiny_llama(model::tiny_llama_config(), 5);
  req.stop.max_new_tokens = 20;
  req.seed = 3;
  Params p({{"t_start", "1.5"}, {"t_end", "0.0"}});
  for (const auto& s : processor_params()) p.set(s.name, s.default_value);
  auto a = info.factory(p)->generate(req, {});
  auto b = info.factory(p)->generate(req, {});
  EXPECT_EQ(a.tokens.size(), 20u);
  EXPECT_EQ(a.tokens, b.tokens);
  // The last token is drawn at temperature 0: it must be the target's arg-max there.
  Request g = req;
  g.prompt.insert(g.prompt.end(), a.tokens.begin(), a.tokens.end() - 1);
  g.stop.max_new_tokens = 1;
  EXPECT_EQ(create("greedy", {})->generate(g, {}).tokens.back(), a.tokens.back());
}
