// Drafters registered at run time (register_drafter / unregister_drafter; the Python bindings'
// drafters written in Python use them): reached through the registry like a built-in drafter,
// verified by the same verifier (greedy's tokens at temperature 0 whatever they propose), named
// errors for a bad or duplicate name, and references handed out earlier stay valid.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/tiny.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"

using namespace specdec;
using namespace specdec::strategies;

namespace test_strategies_registration {  // this file's own names (its tests compile in a batch with others)

// Proposes max_depth copies of token 7: mostly wrong, sometimes right.
class SevensDrafter : public Drafter {
 public:
  DraftProposal propose(const Tokens&, int64_t max_depth) override {
    DraftProposal d;
    d.tokens.assign(static_cast<size_t>(std::max<int64_t>(max_depth, 0)), 7);
    return d;
  }
  bool has_distribution() const override { return false; }
};

DrafterInfo sevens(const std::string& name) {
  DrafterInfo info;
  info.name = name;
  info.description = "test: proposes 7s";
  info.factory = [](const DrafterContext&) -> std::unique_ptr<Drafter> { return std::make_unique<SevensDrafter>(); };
  return info;
}

Params P(std::map<std::string, std::string> values) { return Params(std::move(values)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DrafterRegistration, RunTimeDrafterRunsThroughTheRegistryAndTheVerifier) {
  const DrafterInfo& ngram = find_drafter("ngram");  // a reference taken before registering
  const size_t n_before = all_drafters().size();
  register_drafter(sevens("test_sevens"));
  EXPECT_EQ(all_drafters().size(), n_before + 1);
  EXPECT_EQ(all_drafters().back().name, "test_sevens");
  EXPECT_EQ(ngram.name, "ngram");  // still valid
  Request req;
  req.prompt = {1, 2, 3};
  req.target = model::make_tiny_llama(model::tiny_llama_config(), 5);
  req.stop.max_new_tokens = 24;
  const Result spec = create("speculative", P({{"drafter", "test_sevens"}, {"temperature", "0"}}))->generate(req, {});
  const Result greedy = create("greedy", P({{"temperature", "0"}}))->generate(req, {});
  EXPECT_EQ(spec.tokens, greedy.tokens);
  EXPECT_GT(spec.stats.n_drafted, spec.stats.n_accepted);
  unregister_drafter("test_sevens");
  EXPECT_EQ(all_drafters().size(), n_before);
  EXPECT_NE(error_of([] { create("speculative", P({{"drafter", "test_sevens"}})); }).find("unknown drafter 'test_sevens'"),
            std::string::npos);
}

TEST(DrafterRegistration, NamedErrors) {
  EXPECT_NE(error_of([] { register_drafter(sevens("ngram")); }).find("'ngram' is already registered (built in)"),
            std::string::npos);
  EXPECT_NE(error_of([] { register_drafter(sevens("bad name")); }).find("bad drafter name 'bad name'"),
            std::string::npos);
  EXPECT_NE(error_of([] { register_drafter(sevens("auto")); }).find("'auto'"), std::string::npos);
  find("speculative");  // the speculative schema is made: a drafter registered now takes no parameters
  DrafterInfo with_params = sevens("test_params");
  with_params.params = {{"sevens_k", "int", "1", "?"}};
  EXPECT_NE(error_of([&] { register_drafter(with_params); }).find("declares parameters (sevens_k)"), std::string::npos);
  DrafterInfo no_factory = sevens("test_nofactory");
  no_factory.factory = nullptr;
  EXPECT_NE(error_of([&] { register_drafter(no_factory); }).find("has no factory"), std::string::npos);
  register_drafter(sevens("test_twice"));
  EXPECT_NE(error_of([] { register_drafter(sevens("test_twice")); }).find("'test_twice' is already registered"),
            std::string::npos);
  unregister_drafter("test_twice");
  EXPECT_NE(error_of([] { unregister_drafter("ngram"); }).find("'ngram' is a built-in drafter"), std::string::npos);
  EXPECT_NE(error_of([] { unregister_drafter("test_none"); }).find("unknown drafter 'test_none'"), std::string::npos);
}

}  // namespace test_strategies_registration
