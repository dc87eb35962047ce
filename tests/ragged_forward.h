#pragma once
// Ragged batched forwards (ForwardOptions::n_fed) against each sequence fed alone: shared by
// the tiny-llama unit test and the SmolLM2 integration test. Five sequences go through one
// batched cache in stages of prefill-, verify- and decode-sized rows with different start
// positions and fed counts (0 included, and a rollback), then a layer subset and a token tree;
// every fed row's logits (and final hidden state) must equal the same forward in a batch of one
// BIT FOR BIT, every unfed row must be zero, and the cache lengths must be start + n_fed.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::testing_ragged {

struct Stage {
  const char* name;
  std::vector<int64_t> start, n_fed;
  std::vector<int64_t> layers;    // ForwardOptions::layers
  std::vector<int32_t> parents;   // ForwardOptions::parents (a prefix of it for each sequence)
};

inline void expect_ragged_equals_alone(model::CausalLM& m) {
  using namespace specdec::model;
  const int64_t B = 5, S = 32, V = m.config().n_vocab, L = m.config().n_layers;
  std::mt19937_64 rng(7);
  const std::vector<Stage> stages = {
      {"prefill", {0, 0, 0, 0, 0}, {9, 3, 6, 1, 0}, {}, {}},
      {"verify", {9, 3, 6, 1, 0}, {5, 1, 3, 0, 4}, {}, {}},
      {"decode after a rollback", {12, 4, 9, 1, 4}, {1, 1, 1, 1, 1}, {}, {}},
      {"mixed", {13, 5, 10, 2, 5}, {1, 5, 0, 3, 1}, {}, {}},
      {"layer subset", {14, 10, 10, 5, 6}, {2, 0, 4, 1, 3}, {0, L - 1}, {}},
      {"tree", {16, 10, 14, 6, 9}, {5, 3, 0, 2, 1}, {}, {-1, 0, 0, 1, 2}},
  };
  KVCache batched = m.make_cache(B, S);
  std::vector<KVCache> alone;
  for (int64_t b = 0; b < B; ++b) alone.push_back(m.make_cache(1, S));
  for (const Stage& st : stages) {
    SCOPED_TRACE(st.name);
    const int64_t T = *std::max_element(st.n_fed.begin(), st.n_fed.end());
    // Unfed rows hold an out-of-vocabulary id: the forward must not read them.
    at::Tensor tokens = at::full({B, T}, V + 1000, at::kLong);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < st.n_fed[b]; ++t) tokens[b][t] = static_cast<int64_t>(rng() % V);
    ForwardOptions opt;
    opt.n_fed = st.n_fed;
    opt.layers = st.layers;
    opt.final_hidden = true;
    if (!st.parents.empty()) opt.parents.assign(st.parents.begin(), st.parents.begin() + T);
    const ForwardResult got = m.forward(tokens, st.start, batched, opt);  // [B, T, V]
    ASSERT_EQ(got.logits.sizes(), (std::vector<int64_t>{B, T, V}));
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      const int64_t n = st.n_fed[b];
      EXPECT_EQ(batched.length(b), st.start[b] + n);
      if (n < T) {
        EXPECT_TRUE(at::equal(got.logits[b].narrow(0, n, T - n), at::zeros({T - n, V}))) << "unfed rows not zero";
      }
      if (n == 0) {
        alone[b].truncate(0, st.start[b]);  // what a forward of nothing does to the cache
        continue;
      }
      ForwardOptions one;
      one.layers = st.layers;
      one.final_hidden = true;
      if (!st.parents.empty()) one.parents.assign(st.parents.begin(), st.parents.begin() + n);
      const ForwardResult want = m.forward(tokens.narrow(0, b, 1).narrow(1, 0, n), {st.start[b]}, alone[b], one);
      EXPECT_TRUE(at::equal(got.logits[b].narrow(0, 0, n), want.logits[0]))
          << "max |diff| " << (got.logits[b].narrow(0, 0, n) - want.logits[0]).abs().max().item<float>();
      EXPECT_TRUE(at::equal(got.hidden[b].narrow(0, 0, n), want.hidden[0]));
    }
  }
}

}  // namespace specdec::testing_ragged
