// PrefixReuse on the tiny Llama and GPT-2 models: a forward that starts with the stored prefix
// gives the inner model's logits and cache, however much of the prefix it covers (part, all,
// all plus more tokens): bit for bit on the packed Llama engine, whose rows never depend on how
// many are fed; within float rounding on GPT-2's (its GEMMs block by the row count: ~1e-7 seen).
// Anything it does not handle goes to the inner model.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "model/prefix_reuse.h"
#include "model/gpt2.h"
#include "model/tiny.h"

using namespace specdec;
using namespace specdec::model;

namespace {

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(vocab));
  return v;
}

at::Tensor row(const std::vector<int64_t>& ids) { return at::tensor(ids, at::kLong).view({1, -1}); }

bool same(const at::Tensor& a, const at::Tensor& b) { return a.sizes() == b.sizes() && at::equal(a, b); }

// Bit for bit on llama; |a - b| <= 1e-5 on gpt2 (a wrong row or position is off by ~1e-1).
double g_tolerance = 0;
bool close(const at::Tensor& a, const at::Tensor& b) {
  if (g_tolerance == 0) return same(a, b);
  return a.sizes() == b.sizes() && (a - b).abs().max().item<double>() <= g_tolerance;
}

// Runs `fed` from position 0, then one more token, through `m`; returns both logits and the
// cache's K/V of every layer up to its length.
struct Run {
  at::Tensor logits, next;
  std::vector<at::Tensor> kv;
  int64_t length = 0;
};
Run run(CausalLM& m, const std::vector<int64_t>& fed, int64_t next_token) {
  Run r;
  KVCache cache = m.make_cache(1, static_cast<int64_t>(fed.size()) + 1);
  r.logits = m.forward(row(fed), {0}, cache);
  r.next = m.forward(row({next_token}), {static_cast<int64_t>(fed.size())}, cache);
  r.length = cache.length(0);
  for (int64_t l = 0; l < cache.n_layers(); ++l) {
    r.kv.push_back(cache.k(l)[0].narrow(1, 0, r.length).clone());
    r.kv.push_back(cache.v(l)[0].narrow(1, 0, r.length).clone());
  }
  return r;
}

void expect_same_runs(const Run& a, const Run& b) {
  EXPECT_TRUE(close(a.logits, b.logits));
  EXPECT_TRUE(close(a.next, b.next));
  EXPECT_EQ(a.length, b.length);
  ASSERT_EQ(a.kv.size(), b.kv.size());
  for (size_t i = 0; i < a.kv.size(); ++i) EXPECT_TRUE(close(a.kv[i], b.kv[i])) << "tensor " << i;
}

class PrefixReuseTiny : public ::testing::TestWithParam<const char*> {
 protected:
  std::shared_ptr<CausalLM> inner() const {
    const bool llama = std::string(GetParam()) == "llama";
    g_tolerance = llama ? 0 : 1e-5;
    return llama ? make_tiny_llama(tiny_llama_config(), 3) : make_tiny_gpt2(tiny_gpt2_config(), 3);
  }
};

TEST_P(PrefixReuseTiny, EqualsTheInnerModelBitForBit) {
  auto base = inner();
  const int64_t V = base->config().n_vocab;
  const auto prompt = random_ids(13, V, 1);
  PrefixReuse reuse(base, prompt);
  auto extended = prompt;
  for (int64_t x : random_ids(4, V, 2)) extended.push_back(x);
  auto diverging = prompt;
  diverging[7] = (diverging[7] + 1) % V;  // shares 7 tokens
  const std::vector<std::vector<int64_t>> cases = {
      prompt,                                        // the whole prefix
      {prompt.begin(), prompt.begin() + 5},          // part of it
      extended,                                      // all of it, then 4 more tokens
      diverging,                                     // 7 shared, then different
      random_ids(9, V, 5)};                          // (almost surely) nothing shared
  int64_t expected_reused = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t before = reuse.reused_tokens();
    expect_same_runs(run(reuse, cases[c], 2), run(*base, cases[c], 2));
    int64_t shared = 0;
    while (shared < static_cast<int64_t>(std::min(prompt.size(), cases[c].size())) &&
           cases[c][static_cast<size_t>(shared)] == prompt[static_cast<size_t>(shared)])
      ++shared;
    EXPECT_EQ(reuse.reused_tokens() - before, shared);
    expected_reused += shared;
  }
  EXPECT_EQ(reuse.reused_tokens(), expected_reused);
  EXPECT_GE(expected_reused, 13 + 5 + 13 + 7);
}

// Not a plain prefill from position 0 of one sequence: the inner model's result, nothing reused.
TEST_P(PrefixReuseTiny, PassesEverythingElseThrough) {
  auto base = inner();
  const auto prompt = random_ids(6, base->config().n_vocab, 7);
  PrefixReuse reuse(base, prompt);
  if (!base->ragged_batches()) {  // a batch of two on an engine without ragged batches (GPT-2)
    KVCache a = reuse.make_cache(2, 8), b = base->make_cache(2, 8);
    const at::Tensor ids = at::cat({row(prompt), row(prompt)}, 0);
    EXPECT_TRUE(same(reuse.forward(ids, {0, 0}, a), base->forward(ids, {0, 0}, b)));  // same path: equal
  }
  {  // hidden states asked for
    KVCache a = reuse.make_cache(1, 8), b = base->make_cache(1, 8);
    ForwardOptions o;
    o.final_hidden = true;
    const auto x = reuse.forward(row(prompt), {0}, a, o), y = base->forward(row(prompt), {0}, b, o);
    EXPECT_TRUE(same(x.logits, y.logits));
    EXPECT_TRUE(same(x.hidden, y.hidden));
  }
  {  // a forward that starts later than position 0
    KVCache a = reuse.make_cache(1, 8), b = base->make_cache(1, 8);
    reuse.forward(row({prompt[0]}), {0}, a);
    base->forward(row({prompt[0]}), {0}, b);
    const std::vector<int64_t> rest(prompt.begin() + 1, prompt.end());
    EXPECT_TRUE(same(reuse.forward(row(rest), {1}, a), base->forward(row(rest), {1}, b)));
  }
  EXPECT_EQ(reuse.reused_tokens(), 1);  // only the one-token prefill above
}

INSTANTIATE_TEST_SUITE_P(Engines, PrefixReuseTiny, ::testing::Values("llama", "gpt2"));

// A ragged batch (batched generation's forward, strategies/batch.h) on the packed Llama engine:
// rows from position 0 that start with the prefix are served from it, the others (a later
// start, another prompt, an idle slot) run as they are; every fed row's logits and every
// slot's K/V equal the inner model's ragged forward bit for bit, also in the next step.
TEST(PrefixReuse, RaggedBatchRowsEqualTheInnerModelBitForBit) {
  auto base = make_tiny_llama(tiny_llama_config(), 3);
  const int64_t V = base->config().n_vocab;
  const auto prompt = random_ids(11, V, 21);
  PrefixReuse reuse(base, prompt);
  ASSERT_TRUE(reuse.ragged_batches());
  auto extended = prompt;
  for (int64_t x : random_ids(3, V, 22)) extended.push_back(x);
  const auto other = random_ids(6, V, 23);
  // slot 0: prompt + 3 tokens; 1: 4 prompt tokens; 2: decodes 2 tokens after a 5-token prefill
  // of the prompt; 3: idle; 4: another prompt.
  const std::vector<std::vector<int64_t>> fed = {extended, {prompt.begin(), prompt.begin() + 4}, random_ids(2, V, 24),
                                                 {}, other};
  const int64_t B = static_cast<int64_t>(fed.size()), T = 14;
  KVCache a = reuse.make_cache(B, 20), b = base->make_cache(B, 20);
  for (KVCache* c : {&a, &b}) {  // slot 2's earlier prefill, on the inner model for both
    ForwardOptions o;
    o.n_fed = {0, 0, 5, 0, 0};
    at::Tensor ids = at::zeros({B, 5}, at::kLong);
    ids[2].copy_(row(prompt)[0].narrow(0, 0, 5));
    base->forward(ids, {0, 0, 0, 0, 0}, *c, o);
  }
  ForwardOptions o;
  at::Tensor ids = at::zeros({B, T}, at::kLong);
  for (int64_t i = 0; i < B; ++i) {
    o.n_fed.push_back(static_cast<int64_t>(fed[static_cast<size_t>(i)].size()));
    if (!fed[static_cast<size_t>(i)].empty()) ids[i].narrow(0, 0, o.n_fed.back()).copy_(row(fed[static_cast<size_t>(i)])[0]);
  }
  const std::vector<int64_t> start = {0, 0, 5, 0, 0};
  const at::Tensor x = reuse.forward(ids, start, a, o).logits, y = base->forward(ids, start, b, o).logits;
  EXPECT_TRUE(same(x, y));
  EXPECT_EQ(reuse.reused_tokens(), 11 + 4);
  // The next step: every slot decodes one token; then compare every slot's cache.
  ForwardOptions o2;
  o2.n_fed = {1, 1, 1, 1, 1};
  std::vector<int64_t> start2;
  for (int64_t i = 0; i < B; ++i) {
    EXPECT_EQ(a.length(i), b.length(i)) << "slot " << i;
    start2.push_back(b.length(i));
  }
  const at::Tensor next = at::tensor(random_ids(B, V, 25), at::kLong).view({B, 1});
  EXPECT_TRUE(same(reuse.forward(next, start2, a, o2).logits, base->forward(next, start2, b, o2).logits));
  for (int64_t i = 0; i < B; ++i) {
    ASSERT_EQ(a.length(i), b.length(i)) << "slot " << i;
    for (int64_t l = 0; l < a.n_layers(); ++l) {
      EXPECT_TRUE(same(a.k(l)[i].narrow(1, 0, a.length(i)), b.k(l)[i].narrow(1, 0, b.length(i)))) << "slot " << i;
      EXPECT_TRUE(same(a.v(l)[i].narrow(1, 0, a.length(i)), b.v(l)[i].narrow(1, 0, b.length(i)))) << "slot " << i;
    }
  }
  EXPECT_EQ(reuse.reused_tokens(), 11 + 4);  // a later start reuses nothing
}

// A dense batch (no n_fed) of newcomers that all feed the prompt, as forward_batch hands over
// when every slot joins with the same prompt (the checks' first batch): the prompt is served for
// each slot and the rest runs as a ragged batch, bit for bit the inner model's. Before, a dense
// batch went to the inner model whole: every check batch recomputed the prefill 8 times (the
// quickstart's checks 5x slower).
TEST(PrefixReuse, DenseBatchOfNewcomersIsServedFromThePrefix) {
  auto base = make_tiny_llama(tiny_llama_config(), 3);
  const int64_t V = base->config().n_vocab;
  const auto prompt = random_ids(9, V, 31);
  PrefixReuse reuse(base, prompt);
  const int64_t B = 3, T = 11;  // slot 0: the prompt + 2 tokens; 1: another text; 2: like slot 0
  at::Tensor ids = at::zeros({B, T}, at::kLong);
  for (int64_t i = 0; i < B; ++i) {
    std::vector<int64_t> fed = i == 1 ? random_ids(T, V, 32) : prompt;
    if (i != 1) for (int64_t x : random_ids(2, V, 33)) fed.push_back(x);
    ids[i].copy_(row(fed)[0]);
  }
  KVCache a = reuse.make_cache(B, 16), b = base->make_cache(B, 16);
  EXPECT_TRUE(same(reuse.forward(ids, {0, 0, 0}, a), base->forward(ids, {0, 0, 0}, b)));
  EXPECT_EQ(reuse.reused_tokens(), 2 * 9);
  const at::Tensor next = at::tensor(random_ids(B, V, 34), at::kLong).view({B, 1});
  EXPECT_TRUE(same(reuse.forward(next, {T, T, T}, a), base->forward(next, {T, T, T}, b)));
  for (int64_t i = 0; i < B; ++i)
    for (int64_t l = 0; l < a.n_layers(); ++l)
      EXPECT_TRUE(same(a.k(l)[i].narrow(1, 0, T + 1), b.k(l)[i].narrow(1, 0, T + 1))) << "slot " << i;
}

TEST(PrefixReuse, TellsWhetherItsModelTakesRaggedBatches) {
  EXPECT_TRUE(PrefixReuse(make_tiny_llama(), {1, 2}).ragged_batches());
  EXPECT_FALSE(PrefixReuse(make_tiny_gpt2(tiny_gpt2_config(), 3), {1, 2}).ragged_batches());
}

TEST(PrefixReuse, RefusesAnEmptyPrefixOrNoModel) {
  EXPECT_THROW(PrefixReuse(make_tiny_llama(), {}), std::exception);
  EXPECT_THROW(PrefixReuse(nullptr, {1, 2}), std::exception);
}

}  // namespace
