// Tree forwards on SmolLM2-135M: one forward over a token tree gives, for every node, the
// logits of feeding that node's root-to-node path as a chain -- bit for bit with packed
// weights (every row goes through the same kernels, and attend() visits the same keys in
// the same order). Also: explicit positions, layer subsets, hidden-state outputs, bad options.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/gguf.h"
#include "model/linear.h"
#include "model/loader.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::model;

namespace test_model_tree_smollm2 {  // this file's own names (its tests compile in a batch with others)

const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";
// "def fibonacci(n):" and a few more ids: any in-vocabulary prefix will do.
const std::vector<int64_t> kPrompt = {1, 563, 28601, 28, 90, 2730, 198, 262, 446, 284, 1024, 42};

at::Tensor ids_tensor(const std::vector<int64_t>& ids) {  // [1, T]
  return at::tensor(at::IntArrayRef(ids), at::kLong).view({1, -1});
}

// A random tree of n nodes in topological order: parents[t] in [-1, t).
std::vector<int32_t> random_tree(int64_t n, std::mt19937& gen) {
  std::vector<int32_t> parents(n);
  for (int64_t t = 0; t < n; ++t) parents[t] = std::uniform_int_distribution<int32_t>(-1, int32_t(t) - 1)(gen);
  return parents;
}

std::vector<int64_t> path_to(const std::vector<int32_t>& parents, int64_t node) {
  std::vector<int64_t> path;
  for (int64_t a = node; a >= 0; a = parents[a]) path.insert(path.begin(), a);
  return path;
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.contiguous().data_ptr<float>(), b.contiguous().data_ptr<float>(),
                                               a.numel() * sizeof(float)) == 0;
}

class SmolLM2Tree : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;
    set_threads(2);
    model_ = load_llama_gguf(*io::GgufFile::open(kModel));
  }
  static void TearDownTestSuite() { model_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
    ASSERT_TRUE(model_);
  }
  // A cache holding the prompt.
  static KVCache prefilled(int64_t capacity) {
    KVCache cache = model_->make_cache(1, capacity);
    model_->forward(ids_tensor(kPrompt), {0}, cache);
    return cache;
  }
  static inline std::shared_ptr<CausalLM> model_;
};

TEST_F(SmolLM2Tree, EveryNodeEqualsItsPathFedAsAChain) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), V = model_->config().n_vocab;
  std::mt19937 gen(11);
  int64_t n_nodes = 0;
  float worst = 0;
  for (int64_t n : {1, 3, 8, 17, 32}) {
    const std::vector<int32_t> parents = random_tree(n, gen);
    std::vector<int64_t> tokens(n);
    for (auto& t : tokens) t = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
    KVCache cache = prefilled(P + n);
    ForwardOptions opt;
    opt.parents = parents;
    opt.final_hidden = true;
    const ForwardResult tree = model_->forward(ids_tensor(tokens), {P}, cache, opt);
    ASSERT_EQ(tree.logits.sizes(), (at::IntArrayRef{1, n, V}));
    ASSERT_EQ(cache.length(0), P + n);
    for (int64_t node = 0; node < n; ++node) {
      const std::vector<int64_t> path = path_to(parents, node);
      std::vector<int64_t> chain_tokens;
      for (int64_t a : path) chain_tokens.push_back(tokens[a]);
      KVCache chain_cache = prefilled(P + n);
      ForwardOptions chain_opt;
      chain_opt.final_hidden = true;
      const ForwardResult chain = model_->forward(ids_tensor(chain_tokens), {P}, chain_cache, chain_opt);
      const at::Tensor a = tree.logits[0][node], b = chain.logits[0][static_cast<int64_t>(path.size()) - 1];
      worst = std::max(worst, (a - b).abs().max().item<float>());
      if (linear_has_skinny()) {
        EXPECT_TRUE(bit_equal(a, b)) << "tree of " << n << " nodes, node " << node << " (depth " << path.size() << ")";
        EXPECT_TRUE(bit_equal(tree.hidden[0][node], chain.hidden[0][static_cast<int64_t>(path.size()) - 1]));
      }
      ++n_nodes;
    }
  }
  EXPECT_LT(worst, 2e-3f);
  std::printf("%lld tree nodes; max |tree - chain| = %.3g\n", static_cast<long long>(n_nodes), worst);
}

TEST_F(SmolLM2Tree, ExplicitPositionsEqualTheDefaultAndShiftTheResult) {
  const int64_t P = static_cast<int64_t>(kPrompt.size());
  const std::vector<int32_t> parents = {-1, 0, 0, 1, -1};
  const std::vector<int64_t> tokens = {198, 262, 446, 284, 90};
  ForwardOptions opt;
  opt.parents = parents;
  KVCache c1 = prefilled(P + 8), c2 = prefilled(P + 8), c3 = prefilled(P + 8);
  const at::Tensor by_default = model_->forward(ids_tensor(tokens), {P}, c1, opt).logits;
  opt.positions = {P, P + 1, P + 1, P + 2, P};  // start + depth, spelled out
  const at::Tensor spelled = model_->forward(ids_tensor(tokens), {P}, c2, opt).logits;
  EXPECT_TRUE(bit_equal(by_default, spelled));
  opt.positions = {P + 3, P + 4, P + 4, P + 5, P + 3};  // a gap of three positions changes RoPE
  const at::Tensor shifted = model_->forward(ids_tensor(tokens), {P}, c3, opt).logits;
  EXPECT_FALSE(bit_equal(by_default, shifted));
}

TEST_F(SmolLM2Tree, LayerSubsetsAndHiddenStates) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), L = model_->config().n_layers;
  const std::vector<int64_t> tokens = {198, 262, 446};
  // The first k+1 layers of the full model and of the subset {0..k} are the same computation.
  const int64_t k = L / 2;
  ForwardOptions full;
  full.hidden_layer = k;
  KVCache c1 = prefilled(P + 4), c2 = prefilled(P + 4), c3 = prefilled(P + 4);
  const ForwardResult a = model_->forward(ids_tensor(tokens), {P}, c1, full);
  ForwardOptions first;
  for (int64_t l = 0; l <= k; ++l) first.layers.push_back(l);
  first.hidden_layer = k;
  first.logits = false;
  const ForwardResult b = model_->forward(ids_tensor(tokens), {P}, c2, first);
  EXPECT_FALSE(b.logits.defined());
  ASSERT_TRUE(a.layer_hidden.defined() && b.layer_hidden.defined());
  EXPECT_TRUE(bit_equal(a.layer_hidden, b.layer_hidden));
  // Skipping every other layer still gives finite logits, different from the full model's.
  ForwardOptions skip;
  for (int64_t l = 0; l < L; l += 2) skip.layers.push_back(l);
  const at::Tensor s = model_->forward(ids_tensor(tokens), {P}, c3, skip).logits;
  EXPECT_TRUE(at::isfinite(s).all().item<bool>());
  EXPECT_FALSE(bit_equal(s, a.logits));
}

// Batched speculative decoding feeds one tree per sequence in one ragged forward
// (ForwardOptions::parents of B x T entries, n_fed): every fed row equals that sequence's tree
// fed alone, bit for bit -- beside a chain, and beside a newcomer whose prompt is fed as a chain
// ahead of its tree (as speculative/loop.cpp feeds it).
TEST_F(SmolLM2Tree, ATreePerSequenceInARaggedBatchEqualsEachTreeAlone) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), V = model_->config().n_vocab;
  std::mt19937 gen(23);
  // Per sequence: cached prefix length and fed-token parents (empty: a chain).
  struct Seq {
    int64_t start;
    std::vector<int32_t> parents;
    std::vector<int64_t> tokens;
  };
  std::vector<Seq> seqs = {
      {P, random_tree(9, gen), {}}, {P - 4, {}, {}}, {P - 2, random_tree(5, gen), {}}, {0, {}, {}}};
  seqs[1].tokens.resize(3);
  // The newcomer: its whole prompt as a chain, then a 6-node tree hanging off its last token.
  for (int64_t t = 0; t < P; ++t) seqs[3].parents.push_back(static_cast<int32_t>(t - 1));
  for (int32_t parent : random_tree(6, gen))
    seqs[3].parents.push_back(parent < 0 ? int32_t(P - 1) : int32_t(P + parent));
  for (size_t b = 0; b < seqs.size(); ++b) {
    if (!seqs[b].parents.empty()) seqs[b].tokens.resize(seqs[b].parents.size());
    for (auto& t : seqs[b].tokens) t = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
  }
  std::copy(kPrompt.begin(), kPrompt.end(), seqs[3].tokens.begin());
  const int64_t B = static_cast<int64_t>(seqs.size());
  int64_t T = 0;
  for (const Seq& q : seqs) T = std::max<int64_t>(T, static_cast<int64_t>(q.tokens.size()));
  at::Tensor ids = at::zeros({B, T}, at::kLong);
  KVCache cache = model_->make_cache(B, P + T);
  ForwardOptions opt;
  std::vector<int64_t> start;
  for (int64_t b = 0; b < B; ++b) {
    const Seq& q = seqs[b];
    const int64_t n = static_cast<int64_t>(q.tokens.size());
    for (int64_t t = 0; t < n; ++t) ids[b][t] = q.tokens[t];
    for (int64_t t = 0; t < T; ++t)
      opt.parents.push_back(t < static_cast<int64_t>(q.parents.size()) ? q.parents[t] : static_cast<int32_t>(t - 1));
    opt.n_fed.push_back(n);
    start.push_back(q.start);
    if (q.start > 0) {  // the cached prefix: the prompt's first `start` tokens
      const std::vector<int64_t> prefix(kPrompt.begin(), kPrompt.begin() + q.start);
      at::Tensor pre = at::zeros({B, q.start}, at::kLong);
      pre[b].copy_(ids_tensor(prefix)[0]);
      ForwardOptions o;
      o.n_fed.assign(B, 0);
      o.n_fed[b] = q.start;
      std::vector<int64_t> from(B, 0);
      for (int64_t c = 0; c < B; ++c) from[c] = cache.length(c);
      from[b] = 0;
      model_->forward(pre, from, cache, o);
    }
  }
  const at::Tensor batched = model_->forward(ids, start, cache, opt).logits;  // [B, T, V]
  float worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    const Seq& q = seqs[b];
    const int64_t n = static_cast<int64_t>(q.tokens.size());
    EXPECT_EQ(cache.length(b), q.start + n);
    KVCache alone_cache = model_->make_cache(1, P + T);
    if (q.start > 0)
      model_->forward(ids_tensor(std::vector<int64_t>(kPrompt.begin(), kPrompt.begin() + q.start)), {0}, alone_cache);
    ForwardOptions alone_opt;
    alone_opt.parents = q.parents;
    const at::Tensor alone = model_->forward(ids_tensor(q.tokens), {q.start}, alone_cache, alone_opt).logits[0];
    for (int64_t t = 0; t < n; ++t) {
      worst = std::max(worst, (batched[b][t] - alone[t]).abs().max().item<float>());
      if (linear_has_skinny()) EXPECT_TRUE(bit_equal(batched[b][t], alone[t])) << "sequence " << b << " row " << t;
    }
  }
  EXPECT_LT(worst, 2e-3f);
  // One tree per sequence of the wrong size is a named error.
  opt.parents.pop_back();
  try {
    model_->forward(ids, start, cache, opt);
    ADD_FAILURE() << "no error for a short per-sequence tree";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one per sequence"), std::string::npos) << e.what();
  }
}

TEST_F(SmolLM2Tree, BadOptionsAreNamedErrors) {
  const int64_t P = static_cast<int64_t>(kPrompt.size()), L = model_->config().n_layers;
  const std::vector<int64_t> tokens = {198, 262, 446};
  auto expect_error = [&](ForwardOptions opt, const std::string& needle) {
    KVCache cache = prefilled(P + 4);
    try {
      model_->forward(ids_tensor(tokens), {P}, cache, opt);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ForwardOptions o;
  o.parents = {-1, 1, 0};  // a node that is its own parent
  expect_error(o, "parents[1] = 1");
  o.parents = {-1, 0};  // two entries for three tokens
  expect_error(o, "2 parent entries for 0 cached + 3 fed tokens");
  o = {};
  o.layers = {3, 1};
  expect_error(o, "layers[1] = 1");
  o.layers = {L};
  expect_error(o, "layers[0] = " + std::to_string(L));
  o = {};
  o.hidden_layer = L;
  expect_error(o, "hidden_layer = " + std::to_string(L));
  o = {};
  o.positions = {0, 1};
  expect_error(o, "2 positions for 1 x 3");
  o.positions = {0, -1, 2};
  expect_error(o, "positions[1] = -1");
}

// A drafter grows its tree level by level: feeding the nodes in two forwards (the second
// with tree_cached = the first's node count) gives the same rows as one forward of the tree.
TEST_F(SmolLM2Tree, GrowingATreeOverTwoForwardsEqualsOneForward) {
  const int64_t P = static_cast<int64_t>(kPrompt.size());
  const std::vector<int32_t> parents = {-1, -1, 0, 0, 1, 2, 4};
  const std::vector<int64_t> tokens = {198, 262, 446, 284, 90, 1024, 42};
  KVCache once = prefilled(P + 8), twice = prefilled(P + 8);
  ForwardOptions all;
  all.parents = parents;
  const at::Tensor whole = model_->forward(ids_tensor(tokens), {P}, once, all).logits[0];  // [7, V]
  ForwardOptions first;
  first.parents.assign(parents.begin(), parents.begin() + 4);
  const at::Tensor a = model_->forward(ids_tensor({tokens.begin(), tokens.begin() + 4}), {P}, twice, first).logits[0];
  ForwardOptions second;
  second.parents = parents;
  second.tree_cached = 4;
  const at::Tensor b = model_->forward(ids_tensor({tokens.begin() + 4, tokens.end()}), {P + 4}, twice, second).logits[0];
  EXPECT_TRUE(bit_equal(at::cat({a, b}), whole));
  second.tree_cached = P + 5;  // more cached tree nodes than slots before start
  EXPECT_THROW(model_->forward(ids_tensor({tokens.begin() + 4, tokens.end()}), {P + 4}, twice, second), Error);
}

}  // namespace test_model_tree_smollm2
