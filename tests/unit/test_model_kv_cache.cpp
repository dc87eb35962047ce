// KVCache: allocation, O(1) truncate, beam reorder, tree compaction, bounds errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/kv_cache.h"

using specdec::Error;
using specdec::model::KVCache;

namespace {

// Fills every layer so that k[l][b][h][s][d] = 1000 l + 100 b + 10 h + s + d / 100 and
// v = -k: each entry is identifiable after a reorder or compaction.
void fill(KVCache& c) {
  for (int64_t l = 0; l < c.n_layers(); ++l) {
    auto k = c.k(l).accessor<float, 4>();
    auto v = c.v(l).accessor<float, 4>();
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t h = 0; h < c.n_kv_heads(); ++h)
        for (int64_t s = 0; s < c.max_seq(); ++s)
          for (int64_t d = 0; d < c.head_dim(); ++d) {
            float x = 1000.f * l + 100.f * b + 10.f * h + s + d / 100.f;
            k[b][h][s][d] = x;
            v[b][h][s][d] = -x;
          }
  }
}

float expect_val(int64_t l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return 1000.f * l + 100.f * b + 10.f * h + s + d / 100.f;
}

}  // namespace

TEST(KVCache, AllocatesZeroedTensorsOfTheRightShape) {
  KVCache c(3, 2, 4, 16, 8);
  EXPECT_EQ(c.n_layers(), 3);
  EXPECT_EQ(c.batch(), 2);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(c.k(l).sizes(), (std::vector<int64_t>{2, 4, 16, 8}));
    EXPECT_EQ(c.v(l).sizes(), (std::vector<int64_t>{2, 4, 16, 8}));
    EXPECT_EQ(c.k(l).abs().sum().item<float>(), 0.f);
  }
  EXPECT_EQ(c.length(0), 0);
  EXPECT_EQ(c.length(1), 0);
  EXPECT_EQ(c.memory_bytes(), 2 * 3 * 2 * 4 * 16 * 8 * 4);
  KVCache h(1, 1, 2, 4, 2, at::kBFloat16);
  EXPECT_EQ(h.memory_bytes(), 2 * 1 * 1 * 2 * 4 * 2 * 2);
}

TEST(KVCache, RejectsBadDimensions) {
  EXPECT_THROW(KVCache(0, 1, 1, 1, 1), Error);
  EXPECT_THROW(KVCache(1, 1, 1, 0, 1), Error);
  EXPECT_THROW(KVCache(1, -2, 1, 4, 1), Error);
}

TEST(KVCache, TruncateOnlyMovesTheLengthAndNeverExtends) {
  KVCache c(1, 2, 1, 8, 2);
  fill(c);
  c.set_length(0, 6);
  c.set_length(1, 3);
  c.truncate(0, 2);
  EXPECT_EQ(c.length(0), 2);
  EXPECT_EQ(c.length(1), 3);
  // Data stays where it was: rollback is O(1).
  EXPECT_FLOAT_EQ(c.k(0)[0][0][5][1].item<float>(), expect_val(0, 0, 0, 5, 1));
  EXPECT_THROW(c.truncate(0, 3), Error);   // beyond the current length
  EXPECT_THROW(c.truncate(0, -1), Error);
  EXPECT_THROW(c.truncate(2, 0), Error);   // no such sequence
  EXPECT_THROW(c.set_length(0, 9), Error);  // beyond max_seq
  EXPECT_THROW(c.set_length(-1, 0), Error);
  EXPECT_THROW(c.length(5), std::out_of_range);
}

TEST(KVCache, ReorderGathersSequencesAndLengths) {
  KVCache c(2, 3, 2, 5, 3);
  fill(c);
  c.set_length(0, 1);
  c.set_length(1, 4);
  c.set_length(2, 2);
  c.reorder({2, 0, 0});  // beams may be duplicated or dropped
  EXPECT_EQ(c.lengths(), (std::vector<int64_t>{2, 1, 1}));
  const int64_t src[3] = {2, 0, 0};
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t s = 0; s < 5; ++s) {
          EXPECT_FLOAT_EQ(c.k(l)[b][h][s][2].item<float>(), expect_val(l, src[b], h, s, 2));
          EXPECT_FLOAT_EQ(c.v(l)[b][h][s][0].item<float>(), -expect_val(l, src[b], h, s, 0));
        }
  EXPECT_THROW(c.reorder({0, 1}), Error);      // wrong count
  EXPECT_THROW(c.reorder({0, 1, 3}), Error);   // out of range
  EXPECT_THROW(c.reorder({0, -1, 1}), Error);
}

TEST(KVCache, CompactMovesKeptPositionsAndLeavesTheRestAlone) {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    KVCache c(2, 2, 2, 10, 2);
    fill(c);
    if (dtype == at::kBFloat16) {  // same content, other storage type (fallback path)
      KVCache h(2, 2, 2, 10, 2, at::kBFloat16);
      for (int64_t l = 0; l < 2; ++l) {
        h.k(l).copy_(c.k(l));
        h.v(l).copy_(c.v(l));
      }
      c = h;
    }
    c.set_length(0, 7);
    c.set_length(1, 9);
    c.compact(1, 3, {4, 6, 8});
    EXPECT_EQ(c.length(1), 6);
    EXPECT_EQ(c.length(0), 7);
    const int64_t expect_src[6] = {0, 1, 2, 4, 6, 8};
    for (int64_t l = 0; l < 2; ++l)
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t s = 0; s < 6; ++s) {
          // bf16 holds these values to ~0.4%: compare with a relative tolerance.
          float want = expect_val(l, 1, h, expect_src[s], 1);
          EXPECT_NEAR(c.k(l)[1][h][s][1].item<float>(), want, 0.01 * std::abs(want) + 1e-3);
          EXPECT_NEAR(c.v(l)[1][h][s][1].item<float>(), -want, 0.01 * std::abs(want) + 1e-3);
        }
        for (int64_t s = 0; s < 10; ++s) {  // the other sequence is untouched
          float want = expect_val(l, 0, h, s, 0);
          EXPECT_NEAR(c.k(l)[0][h][s][0].item<float>(), want, 0.01 * std::abs(want) + 1e-3);
        }
      }
  }
}

TEST(KVCache, CompactEdgeCasesAndErrors) {
  KVCache c(1, 1, 1, 8, 1);
  fill(c);
  c.set_length(0, 6);
  c.compact(0, 2, {2, 3});  // identity: nothing moves
  EXPECT_EQ(c.length(0), 4);
  EXPECT_FLOAT_EQ(c.k(0)[0][0][3][0].item<float>(), 3.f);
  c.compact(0, 1, {});  // keep nothing after position 1
  EXPECT_EQ(c.length(0), 1);
  c.set_length(0, 6);
  EXPECT_THROW(c.compact(0, 2, {3, 3}), Error);  // not strictly ascending
  EXPECT_THROW(c.compact(0, 2, {4, 3}), Error);
  EXPECT_THROW(c.compact(0, 2, {1}), Error);     // before start
  EXPECT_THROW(c.compact(0, 2, {6}), Error);     // beyond the length
  EXPECT_THROW(c.compact(0, 7, {}), Error);      // start beyond the length
  EXPECT_THROW(c.compact(1, 0, {}), Error);      // no such sequence
  EXPECT_EQ(c.length(0), 6);                     // failed calls change nothing
}
