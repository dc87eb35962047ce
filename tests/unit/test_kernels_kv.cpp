// KV-cache kernels (CPU): compaction against a naive gather, beam reorder, O(1) rollback,
// and input errors that leave the cache untouched.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/kv_math.h"

namespace sk = specdec::kernels;

namespace {

struct Layer {
  int64_t B, H, S, D;
  std::vector<float> kv;  // [B, H, S, D]
  Layer(int64_t b, int64_t h, int64_t s, int64_t d, uint64_t seed) : B(b), H(h), S(s), D(d), kv(b * h * s * d) {
    specdec::Rng rng(seed);
    for (auto& x : kv) x = rng.uniformf();
  }
  float& at(int64_t b, int64_t h, int64_t s, int64_t d) { return kv[((b * H + h) * S + s) * D + d]; }
};

// The obvious out-of-place gather the kernel must reproduce.
std::vector<float> naive_compact(Layer layer, const std::vector<std::vector<int64_t>>& keep,
                                 const std::vector<int64_t>& dst_start) {
  const Layer before = layer;
  for (int64_t b = 0; b < layer.B; ++b)
    for (int64_t h = 0; h < layer.H; ++h)
      for (size_t i = 0; i < keep[b].size(); ++i)
        for (int64_t d = 0; d < layer.D; ++d)
          layer.at(b, h, dst_start[b] + i, d) = before.kv[((b * layer.H + h) * layer.S + keep[b][i]) * layer.D + d];
  return layer.kv;
}

struct CompactCall {
  std::vector<int64_t> src_pos;  // [B, max_keep]
  std::vector<int32_t> n_keep;
  std::vector<int64_t> lengths;
  sk::CompactArgs args;
};

CompactCall make_call(Layer& layer, const std::vector<std::vector<int64_t>>& keep,
                      const std::vector<int64_t>& dst_start, int64_t max_keep) {
  CompactCall c;
  c.src_pos.assign(layer.B * max_keep, -1);
  for (int64_t b = 0; b < layer.B; ++b) {
    c.n_keep.push_back(static_cast<int32_t>(keep[b].size()));
    for (size_t i = 0; i < keep[b].size(); ++i) c.src_pos[b * max_keep + i] = keep[b][i];
  }
  c.lengths.assign(layer.B, 999);
  c.args.kv = layer.kv.data();
  c.args.batch = layer.B, c.args.heads = layer.H, c.args.max_seq = layer.S, c.args.head_dim = layer.D;
  c.args.src_pos = c.src_pos.data(), c.args.n_keep = c.n_keep.data(), c.args.dst_start = dst_start.data();
  c.args.max_keep = max_keep, c.args.lengths = c.lengths.data();
  return c;
}

}  // namespace

TEST(KernelsKv, CompactMatchesNaiveGather) {
  // Sequence 0: a tree path with gaps; 1: adjacent sources overlapping their destinations
  // (src 5,6,7 -> 4,5,6: a parallel copy without ordering would read overwritten data);
  // 2: nothing kept; 3: already in place.
  Layer layer(4, 3, 32, 8, 1);
  const std::vector<std::vector<int64_t>> keep = {{10, 12, 17, 31}, {5, 6, 7}, {}, {20, 21}};
  const std::vector<int64_t> dst_start = {10, 4, 3, 20};
  const std::vector<float> expected = naive_compact(layer, keep, dst_start);
  CompactCall c = make_call(layer, keep, dst_start, 6);
  sk::kv_compact_cpu(c.args);
  EXPECT_EQ(layer.kv, expected);
  EXPECT_EQ(c.lengths, (std::vector<int64_t>{14, 7, 3, 22}));
}

TEST(KernelsKv, CompactRandomTreesMatchNaiveGather) {
  specdec::Rng rng(9);
  for (int trial = 0; trial < 50; ++trial) {
    Layer layer(3, 2, 48, 16, 100 + trial);
    std::vector<std::vector<int64_t>> keep(3);
    std::vector<int64_t> dst_start(3);
    for (int64_t b = 0; b < 3; ++b) {
      dst_start[b] = static_cast<int64_t>(rng.next() % 20);
      for (int64_t s = dst_start[b]; s < 48; ++s)
        if (rng.uniform() < 0.3 && keep[b].size() < 12) keep[b].push_back(s);
    }
    const std::vector<float> expected = naive_compact(layer, keep, dst_start);
    CompactCall c = make_call(layer, keep, dst_start, 12);
    sk::kv_compact_cpu(c.args);
    ASSERT_EQ(layer.kv, expected) << "trial " << trial;
  }
}

TEST(KernelsKv, CompactBadInputThrowsAndLeavesCacheUntouched) {
  struct Bad {
    std::vector<std::vector<int64_t>> keep;
    std::vector<int64_t> dst_start;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{{3, 5}, {4, 4}}, {0, 0}, "src_pos[1][1]"},           // not strictly ascending
      {{{3, 5}, {1, 6}}, {0, 2}, "src_pos[1][0]"},           // below dst_start
      {{{3, 16}, {1}}, {0, 0}, "src_pos[0][1]"},             // past max_seq
      {{{3, 5}, {14, 15}}, {0, 15}, "dst_start[1]"},         // dst_start + n_keep > max_seq
      {{{0, 1, 2, 3, 4}, {1}}, {0, 0}, "n_keep[0] = 5"},     // more than max_keep
  };
  for (const Bad& bad : cases) {
    Layer layer(2, 2, 16, 4, 5);
    const std::vector<float> before = layer.kv;
    CompactCall c = make_call(layer, bad.keep, bad.dst_start, 5);
    c.args.max_keep = bad.keep[0].size() == 5 ? 4 : 5;  // the last case: n_keep over max_keep
    try {
      sk::kv_compact_cpu(c.args);
      ADD_FAILURE() << "no error for " << bad.message;
    } catch (const specdec::Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos) << e.what();
    }
    EXPECT_EQ(layer.kv, before);
  }
}

TEST(KernelsKv, ReorderMatchesNaiveRowCopy) {
  Layer src(4, 2, 8, 4, 3);
  const int64_t row = 2 * 8 * 4;
  std::vector<float> dst(src.kv.size(), -1.0f);
  const std::vector<int64_t> idx = {2, 2, 0, 3};  // beams may duplicate and drop rows
  sk::kv_reorder_cpu(dst.data(), src.kv.data(), idx.data(), 4, row);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t e = 0; e < row; ++e) ASSERT_EQ(dst[b * row + e], src.kv[idx[b] * row + e]);
}

TEST(KernelsKv, ReorderRejectsBadIndexAndAliasing) {
  std::vector<float> a(8), b(8);
  const std::vector<int64_t> bad = {0, 2};
  EXPECT_THROW(sk::kv_reorder_cpu(b.data(), a.data(), bad.data(), 2, 4), specdec::Error);
  const std::vector<int64_t> ok = {1, 0};
  EXPECT_THROW(sk::kv_reorder_cpu(a.data() + 2, a.data(), ok.data(), 2, 4), specdec::Error);
}

TEST(KernelsKv, RollbackOnlyShortens) {
  std::vector<int64_t> lengths = {10, 20, 30};
  const std::vector<int64_t> rewind = {7, 25, 0};
  sk::kv_rollback(lengths.data(), rewind.data(), 3);
  EXPECT_EQ(lengths, (std::vector<int64_t>{7, 20, 0}));
  const std::vector<int64_t> negative = {1, -1, 0};
  EXPECT_THROW(sk::kv_rollback(lengths.data(), negative.data(), 3), specdec::Error);
  EXPECT_EQ(lengths, (std::vector<int64_t>{7, 20, 0}));
}
