// Verification kernel (CPU path, which runs the same math::verify_row as the CUDA kernel):
// hand-computed cases on 4-8-token vocabularies, corners, determinism, input errors, and
// bit-identity of the CPU sweep with the per-lane (GPU-thread) functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace sk = specdec::kernels;
namespace math = specdec::kernels::math;

namespace test_kernels_verify {  // this file's own names (its tests compile in a batch with others)

// Owns the buffers of one verify call.
struct Case {
  int64_t batch = 1, gamma = 0, vocab = 0;
  sk::VerifyMode mode = sk::VerifyMode::sampling;
  std::vector<int32_t> draft, n_draft;  // [B, gamma], [B]
  std::vector<float> q, p;              // [B, gamma, V], [B, gamma+1, V]
  std::vector<double> u;                // [B, gamma+1]
  std::vector<int32_t> n_acc, out;      // [B], [B, gamma+1]

  void run() {
    n_acc.assign(batch, -7);
    out.assign(batch * (gamma + 1), -7);
    sk::VerifyArgs a;
    a.batch = batch, a.gamma = gamma, a.vocab = vocab, a.mode = mode;
    a.draft_tokens = draft.empty() ? nullptr : draft.data();
    a.n_draft = n_draft.empty() ? nullptr : n_draft.data();
    a.q = q.empty() ? nullptr : q.data();
    a.p = p.data();
    a.uniforms = u.empty() ? nullptr : u.data();
    a.n_accepted = n_acc.data();
    a.out_tokens = out.data();
    sk::verify_cpu(a);
  }
};

Case one_row(sk::VerifyMode mode, int64_t gamma, int64_t vocab, std::vector<int32_t> draft,
             std::vector<float> q, std::vector<float> p, std::vector<float> u) {
  Case c;
  c.gamma = gamma, c.vocab = vocab, c.mode = mode;
  c.n_draft = {static_cast<int32_t>(draft.size())};
  draft.resize(gamma, 0);
  c.draft = draft, c.q = q, c.p = p, c.u.assign(u.begin(), u.end());
  return c;
}

using V = std::vector<float>;
using T = std::vector<int32_t>;

// ---- sampling mode, hand-computed ---------------------------------------------------------

TEST(KernelsVerify, SamplingAllAcceptedThenBonus) {
  // x0 = 1: p/q = 0.25/0.2 > 1, always accepted. x1 = 0: p/q = 0.4/0.5 = 0.8 > u1 = 0.5.
  // Bonus from p2 = [.1 .2 .3 .4] at u = 0.65: CDF .1 .3 .6 1.0 -> token 3.
  Case c = one_row(sk::VerifyMode::sampling, 2, 4, {1, 0},
                   {0.1f, 0.2f, 0.3f, 0.4f, /**/ 0.5f, 0.5f, 0.0f, 0.0f},
                   {0.25f, 0.25f, 0.25f, 0.25f, /**/ 0.4f, 0.1f, 0.3f, 0.2f, /**/ 0.1f, 0.2f, 0.3f, 0.4f},
                   {0.99f, 0.5f, 0.65f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 2);
  EXPECT_EQ(c.out, (T{1, 0, 3}));
}

TEST(KernelsVerify, SamplingFirstRejectedResamplesResidual) {
  // x0 = 1: p/q = 0.2/0.6 = 1/3 < u0 = 0.5 -> rejected. Residual max(0, p - q) =
  // [.2 0 0 .2] -> norm [.5 0 0 .5]: u = 0.3 -> token 0, u = 0.7 -> token 3.
  const V q = {0.1f, 0.6f, 0.2f, 0.1f, /**/ 0.25f, 0.25f, 0.25f, 0.25f};
  const V p = {0.3f, 0.2f, 0.2f, 0.3f, /**/ 1, 0, 0, 0, /**/ 1, 0, 0, 0};
  Case c = one_row(sk::VerifyMode::sampling, 2, 4, {1, 2}, q, p, {0.5f, 0.0f, 0.3f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out, (T{0, -1, -1}));
  c.u = {0.5f, 0.0f, 0.7f};
  c.run();
  EXPECT_EQ(c.out, (T{3, -1, -1}));
  // The same draft is accepted when u0 < 1/3.
  c.u = {0.3f, 0.0f, 0.7f};
  c.run();
  EXPECT_EQ(c.n_acc[0], 1);
}

TEST(KernelsVerify, SamplingRejectionMidDraft) {
  // V = 5, gamma = 3. x0 = 4 accepted (p = q). x1 = 2: p/q = 0.1/0.5 = 0.2 < u1 = 0.6 ->
  // rejected; residual = [0, .3, 0, .1, 0] -> norm [0, .75, 0, .25, 0]; u = 0.8 -> token 3.
  const V q = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f, /**/ 0.1f, 0.0f, 0.5f, 0.1f, 0.3f, /**/ 0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  const V p = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f, /**/ 0.1f, 0.3f, 0.1f, 0.2f, 0.3f, /**/ 0.2f, 0.2f, 0.2f, 0.2f, 0.2f,
               /**/ 0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  Case c = one_row(sk::VerifyMode::sampling, 3, 5, {4, 2, 0}, q, p, {0.9f, 0.6f, 0.0f, 0.8f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 1);
  EXPECT_EQ(c.out, (T{4, 3, -1, -1}));
  c.u[3] = 0.7f;  // 0.7 < 0.75 -> token 1
  c.run();
  EXPECT_EQ(c.out, (T{4, 1, -1, -1}));
}

TEST(KernelsVerify, RaggedDraftsBonusComesFromRowNDraft) {
  // Row i of p (for every sequence) puts all mass on token i + 1, and q = p, so every draft
  // token i + 1 is accepted and the bonus reveals which p row was used: p[n_draft].
  // Draft entries past n_draft hold out-of-range garbage that must be ignored.
  const int64_t B = 3, G = 3, Vn = 6;
  Case c;
  c.batch = B, c.gamma = G, c.vocab = Vn, c.mode = sk::VerifyMode::sampling;
  c.n_draft = {0, 2, 3};
  c.draft = {99, 99, 99, /**/ 1, 2, 99, /**/ 1, 2, 3};
  c.q.assign(B * G * Vn, 0.0f);
  c.p.assign(B * (G + 1) * Vn, 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < G; ++i) c.q[(b * G + i) * Vn + i + 1] = 1.0f;
    for (int64_t i = 0; i <= G; ++i) c.p[(b * (G + 1) + i) * Vn + i + 1] = 1.0f;
  }
  c.u.assign(B * (G + 1), 0.999f);
  c.run();
  EXPECT_EQ(c.n_acc, (T{0, 2, 3}));
  EXPECT_EQ(c.out, (T{1, -1, -1, -1, /**/ 1, 2, 3, -1, /**/ 1, 2, 3, 4}));
  for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::tokens_only}) {
    c.mode = mode;
    c.run();
    EXPECT_EQ(c.n_acc, (T{0, 2, 3}));
    EXPECT_EQ(c.out, (T{1, -1, -1, -1, /**/ 1, 2, 3, -1, /**/ 1, 2, 3, 4}));
  }
}

TEST(KernelsVerify, PEqualsQIsAlwaysAcceptedAndZeroResidualFallsBackToP) {
  // p == q: the acceptance ratio is 1, so even u = 0.999 accepts.
  const V pq = {0.5f, 0.5f, 0.0f, 0.0f};
  Case c = one_row(sk::VerifyMode::sampling, 1, 4, {1}, pq, {0.5f, 0.5f, 0, 0, /**/ 0, 0, 0, 1}, {0.999f, 0.2f});
  c.run();
  EXPECT_EQ(c.out, (T{1, 3}));
  // A drafted token with p = q = 0 is rejected; the residual max(0, p - q) is all zero,
  // so the next token is sampled from p itself: u = 0.75 -> token 1, u = 0.25 -> token 0.
  c.draft = {2};
  c.u = {0.0f, 0.75f};
  c.run();
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out, (T{1, -1}));
  c.u = {0.0f, 0.25f};
  c.run();
  EXPECT_EQ(c.out, (T{0, -1}));
}

TEST(KernelsVerify, QZeroWherePPositive) {
  // q(x) = 0 < p(x): accepted for any u (u*q = 0 < p).
  const V q = {0.5f, 0.5f, 0.0f, 0.0f};
  const V p = {0.2f, 0.2f, 0.6f, 0.0f, /**/ 0, 1, 0, 0};
  Case c = one_row(sk::VerifyMode::sampling, 1, 4, {2}, q, p, {0.999f, 0.5f});
  c.run();
  EXPECT_EQ(c.out, (T{2, 1}));
  // Rejecting x = 0 (p/q = 0.4 < 0.9): the residual [0 0 .6 0] has one token; every u,
  // including the extremes 0 and 1 (a float uniform may round up), must give token 2.
  c.draft = {0};
  for (float ug : {0.0f, 0.5f, 0.999999f, 1.0f}) {
    c.u = {0.9f, ug};
    c.run();
    EXPECT_EQ(c.out, (T{2, -1})) << "u = " << ug;
  }
  // p(x) = 0 is never accepted, not even with u = 0.
  c.draft = {3};
  c.q = {0.0f, 0.0f, 0.0f, 1.0f};
  c.u = {0.0f, 0.5f};
  c.run();
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out[1], -1);
}

TEST(KernelsVerify, SampleWithUOneTakesLastPositiveToken) {
  // Bonus at u = 1: the inverse CDF never reaches a zero-probability tail token.
  Case c = one_row(sk::VerifyMode::sampling, 0, 5, {}, {}, {0.25f, 0.5f, 0.25f, 0.0f, 0.0f}, {1.0f});
  c.run();
  EXPECT_EQ(c.out, (T{2}));
}

// ---- greedy ----------------------------------------------------------------------------

TEST(KernelsVerify, GreedyAcceptsArgmaxAndEmitsArgmaxAtMismatch) {
  const V p = {0.1f, 0.6f, 0.2f, 0.1f, /**/ 0.3f, 0.1f, 0.1f, 0.5f, /**/ 0.7f, 0.1f, 0.1f, 0.1f};
  Case c = one_row(sk::VerifyMode::greedy, 2, 4, {1, 3}, {}, p, {});
  c.run();
  EXPECT_EQ(c.n_acc[0], 2);
  EXPECT_EQ(c.out, (T{1, 3, 0}));
  c.draft = {1, 2};
  c.run();
  EXPECT_EQ(c.n_acc[0], 1);
  EXPECT_EQ(c.out, (T{1, 3, -1}));
  c.draft = {0, 3};
  c.run();
  EXPECT_EQ(c.out, (T{1, -1, -1}));
}

TEST(KernelsVerify, GreedyTiesGoToLowestTokenId) {
  // Tokens 1 and 2 tie; greedy decoding (torch.argmax) picks 1, so a draft of 2 is rejected.
  const V p = {0.1f, 0.4f, 0.4f, 0.1f, /**/ 0.3f, 0.3f, 0.3f, 0.1f};
  Case c = one_row(sk::VerifyMode::greedy, 1, 4, {2}, {}, p, {});
  c.run();
  EXPECT_EQ(c.out, (T{1, -1}));
  c.draft = {1};
  c.run();
  EXPECT_EQ(c.out, (T{1, 0}));  // three-way tie in the bonus row -> token 0
}

TEST(KernelsVerify, ArgmaxRowMatchesLaneReductionOnLargeRows) {
  // argmax_row (CPU, block maxima) and lane_argmax + argmax_merge (one CUDA thread per lane,
  // tree-reduced) must agree, including ties across argmax blocks and lanes, and NaN.
  specdec::Rng rng(7);
  for (int64_t n : {1, 5, 255, 256, 257, 4095, 4096, 4097, 10000, 151936}) {
    std::vector<float> row(n);
    for (auto& v : row) v = rng.uniformf() * 0.5f;
    std::vector<std::vector<int64_t>> tie_sets = {{n - 1}, {0, n - 1}, {n / 2, n - 1}, {n / 3, n / 2}};
    for (const auto& ties : tie_sets) {
      std::vector<float> r = row;
      if (n > 3) r[1] = std::nanf("");  // NaN ranks as -inf (a tie may overwrite it)
      for (int64_t t : ties) r[t] = 0.75f;
      math::ArgMax lanes[math::kLanes];
      for (int l = 0; l < math::kLanes; ++l) lanes[l] = math::lane_argmax(r.data(), n, l);
      for (int s = math::kLanes / 2; s > 0; s >>= 1)
        for (int l = 0; l < s; ++l) lanes[l] = math::argmax_merge(lanes[l], lanes[l + s]);
      const int64_t expected = *std::min_element(ties.begin(), ties.end());
      EXPECT_EQ(math::argmax_row(r.data(), n), expected) << "n = " << n;
      EXPECT_EQ(lanes[0].index, expected) << "n = " << n;
    }
  }
}

// ---- tokens_only (n-gram / prompt lookup drafts) ---------------------------------------

TEST(KernelsVerify, TokensOnlyAcceptsWhileSampleEqualsDraft) {
  // y0 ~ p0 = uniform at u0 = 0.6 -> token 2 == x0: accepted. y1 ~ [.7 .1 .1 .1] at
  // u1 = 0.5 -> token 0 != x1 = 3: emitted.
  const V p = {0.25f, 0.25f, 0.25f, 0.25f, /**/ 0.7f, 0.1f, 0.1f, 0.1f, /**/ 0, 0, 0, 1};
  Case c = one_row(sk::VerifyMode::tokens_only, 2, 4, {2, 3}, {}, p, {0.6f, 0.5f, 0.1f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 1);
  EXPECT_EQ(c.out, (T{2, 0, -1}));
  c.u = {0.6f, 0.95f, 0.1f};  // y1 = 3 == x1 -> bonus from p2 = token 3
  c.run();
  EXPECT_EQ(c.out, (T{2, 3, 3}));
}

// ---- sampler: exact inverse CDF over the lane-major order --------------------------------

TEST(KernelsVerify, SamplerIsExactInverseCdfOverLaneOrder) {
  // For V = 700 (several elements per lane plus a partial tail) the token for u must be the
  // inverse CDF of the residual in lane-major order (lane 0's tokens, then lane 1's, ...),
  // computed here naively. On a grid of 20000 u values each token's share of the grid must
  // equal its probability to within 1/20000 + 1e-9.
  const int64_t n = 700;
  specdec::Rng rng(11);
  std::vector<float> p(n), q(n);
  for (int64_t i = 0; i < n; ++i) p[i] = rng.uniformf() / 350.0f, q[i] = rng.uniformf() / 350.0f;
  std::vector<int64_t> order;
  for (int l = 0; l < math::kLanes; ++l)
    for (int64_t i = l; i < n; i += math::kLanes) order.push_back(i);
  std::vector<double> w(n);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += (w[i] = std::max(0.0, double(p[i]) - double(q[i])));
  const int n_grid = 20000;
  std::vector<int> hits(n, 0);
  specdec::kernels::cpu::CpuRowOps ops;
  for (int g = 0; g < n_grid; ++g) {
    const float u = (g + 0.5f) / n_grid;
    const int64_t tok = ops.sample(p.data(), q.data(), n, u);
    ASSERT_GE(tok, 0);
    ASSERT_GT(w[tok], 0.0);
    hits[tok]++;
  }
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(hits[i] / double(n_grid), w[i] / total, 1.0 / n_grid + 1e-9) << "token " << i;
  // Spot-check the order against the naive walk.
  for (float u : {0.01f, 0.37f, 0.5f, 0.93f}) {
    double target = double(u) * total, cum = 0;
    int64_t expect = -1;
    for (int64_t i : order) {
      if (w[i] > 0 && target < cum + w[i]) { expect = i; break; }
      cum += w[i];
    }
    EXPECT_EQ(ops.sample(p.data(), q.data(), n, u), expect) << "u = " << u;
  }
}

// ---- the CPU code is the GPU code ----------------------------------------------------------

// Emulates GpuRowOps on the host: one lane_mass / lane_argmax per "thread", then the same
// serial pick and tree merge the kernel does.
struct LaneOps {
  int64_t argmax(const float* row, int64_t n) const {
    math::ArgMax a[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) a[l] = math::lane_argmax(row, n, l);
    for (int s = math::kLanes / 2; s > 0; s >>= 1)
      for (int l = 0; l < s; ++l) a[l] = math::argmax_merge(a[l], a[l + s]);
    return a[0].index;
  }
  template <class T>
  int64_t sample(const T* p, const float* q, int64_t n, float u, double s) const {
    double mass[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) mass[l] = math::lane_mass(p, q, n, l, s);
    const math::LanePick pick = math::pick_lane(mass, u);
    return pick.lane < 0 ? -1 : math::scan_lane(p, q, n, pick.lane, pick.remaining, s);
  }
  template <class T>
  double mass(const T* p, const float* q, int64_t n, double s) const {
    double lanes[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) lanes[l] = math::lane_mass(p, q, n, l, s);
    return math::lane_total(lanes);
  }
};

TEST(KernelsVerify, CpuSweepIsBitIdenticalToPerLaneSums) {
  specdec::Rng rng(3);
  for (int64_t n : {7, 256, 1000, 49152, 151936}) {
    std::vector<float> p(n), q(n);
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniformf(), q[i] = rng.uniformf();
    double sweep[math::kLanes];
    for (const float* qq : {static_cast<const float*>(nullptr), static_cast<const float*>(q.data())}) {
      math::lane_masses_sweep(p.data(), qq, n, sweep);
      for (int l = 0; l < math::kLanes; ++l)
        ASSERT_EQ(sweep[l], math::lane_mass(p.data(), qq, n, l)) << "n = " << n << " lane " << l;
    }
  }
}

TEST(KernelsVerify, ScaledAndDoubleRowSweepsAreBitIdenticalToPerLaneSums) {
  // The weights max(0, s p - q) of block and tree verification: s = 1 gives the unscaled
  // weights bit for bit; for other s, for double rows (a materialised residual) and for the
  // in-place materialisation, the CPU sweep equals the per-lane (GPU-thread) functions.
  specdec::Rng rng(4);
  for (int64_t n : {7, 256, 1000, 49152}) {
    std::vector<float> p(n), q(n);
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniformf(), q[i] = rng.uniformf();
    double unscaled[math::kLanes], scaled[math::kLanes], lanes[math::kLanes];
    math::lane_masses_sweep(p.data(), q.data(), n, unscaled);
    math::lane_masses_sweep(p.data(), q.data(), n, scaled, 1.0);
    for (int l = 0; l < math::kLanes; ++l) ASSERT_EQ(unscaled[l], scaled[l]);
    for (double s : {0.37, 1.0 / 0.3}) {
      math::lane_masses_sweep(p.data(), q.data(), n, scaled, s);
      for (int l = 0; l < math::kLanes; ++l) ASSERT_EQ(scaled[l], math::lane_mass(p.data(), q.data(), n, l, s));
      std::vector<double> r(n), r_lanes(n);  // materialise, then the same weights from the double row
      math::materialize_sweep(p.data(), q.data(), n, s, r.data(), scaled);
      for (int l = 0; l < math::kLanes; ++l) lanes[l] = math::lane_materialize(p.data(), q.data(), n, l, s, r_lanes.data());
      ASSERT_EQ(r, r_lanes);
      for (int l = 0; l < math::kLanes; ++l) ASSERT_EQ(scaled[l], lanes[l]);
      std::vector<double> in_place = r;  // in place (dst aliases p), as the tree verifier does
      math::materialize_sweep(in_place.data(), q.data(), n, 0.5, in_place.data(), scaled);
      math::lane_masses_sweep(r.data(), q.data(), n, lanes, 0.5);
      for (int l = 0; l < math::kLanes; ++l) ASSERT_EQ(scaled[l], lanes[l]);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in_place[i], std::max(0.0, 0.5 * r[i] - double(q[i])));
    }
  }
}

TEST(KernelsVerify, CpuOpsAndLaneOpsGiveIdenticalDecisions) {
  // verify_row with the CPU ops and with the per-lane (GPU-style) ops on the same random
  // inputs, all four modes, V = 49152: identical counts and tokens.
  const int64_t G = 4, n = 49152;
  specdec::Rng rng(5);
  std::vector<float> q(G * n), p((G + 1) * n);
  auto fill = [&](float* row, bool peaked) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (row[i] = std::pow(rng.uniformf(), peaked ? 40.0f : 1.0f));
    for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(row[i] / s);
  };
  int n_rejects = 0;
  for (int trial = 0; trial < 12; ++trial) {
    for (int64_t i = 0; i < G; ++i) fill(q.data() + i * n, true);
    for (int64_t i = 0; i <= G; ++i) fill(p.data() + i * n, true);
    std::vector<int32_t> draft(G);
    std::vector<double> u(G + 1);
    for (auto& x : draft) x = static_cast<int32_t>(rng.next() % n);
    for (auto& v : u) v = rng.uniform();
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only,
                      sk::VerifyMode::block}) {
      math::RowView r;
      r.gamma = G, r.n_vocab = n, r.mode = mode, r.draft = draft.data(), r.n_draft = static_cast<int32_t>(G);
      r.q = mode == sk::VerifyMode::sampling || mode == sk::VerifyMode::block ? q.data() : nullptr;
      r.p = p.data(), r.u = u.data();
      specdec::kernels::cpu::CpuRowOps cpu;
      LaneOps lane;
      const math::RowResult a = math::verify_row(r, cpu), b = math::verify_row(r, lane);
      ASSERT_EQ(a.status, math::kRowOk);
      EXPECT_EQ(a.n_accepted, b.n_accepted);
      EXPECT_EQ(a.next_token, b.next_token);
      n_rejects += a.n_accepted < G;
    }
  }
  EXPECT_GT(n_rejects, 10);  // the comparison exercised the residual/resample paths
}

// ---- determinism ---------------------------------------------------------------------------

TEST(KernelsVerify, SameUniformsSameOutputBatchParallel) {
  const int64_t B = 8, G = 5, n = 1000;
  specdec::Rng rng(21);
  Case c;
  c.batch = B, c.gamma = G, c.vocab = n, c.mode = sk::VerifyMode::sampling;
  c.q.resize(B * G * n), c.p.resize(B * (G + 1) * n), c.u.resize(B * (G + 1));
  for (auto* buf : {&c.q, &c.p}) {
    for (size_t r = 0; r < buf->size() / n; ++r) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += ((*buf)[r * n + i] = rng.uniformf());
      for (int64_t i = 0; i < n; ++i) (*buf)[r * n + i] = static_cast<float>((*buf)[r * n + i] / s);
    }
  }
  for (auto& x : c.u) x = rng.uniform();
  c.draft.resize(B * G);
  for (auto& x : c.draft) x = static_cast<int32_t>(rng.next() % n);
  c.n_draft = {5, 4, 3, 2, 1, 0, 5, 5};
  c.run();
  const auto out1 = c.out, acc1 = c.n_acc;
  for (int rep = 0; rep < 3; ++rep) {
    c.run();
    EXPECT_EQ(c.out, out1);
    EXPECT_EQ(c.n_acc, acc1);
  }
  // Each row alone (no batch parallelism) gives the same answer.
  for (int64_t b = 0; b < B; ++b) {
    Case s;
    s.gamma = G, s.vocab = n, s.mode = c.mode;
    s.draft.assign(c.draft.begin() + b * G, c.draft.begin() + (b + 1) * G);
    s.n_draft = {c.n_draft[b]};
    s.q.assign(c.q.begin() + b * G * n, c.q.begin() + (b + 1) * G * n);
    s.p.assign(c.p.begin() + b * (G + 1) * n, c.p.begin() + (b + 1) * (G + 1) * n);
    s.u.assign(c.u.begin() + b * (G + 1), c.u.begin() + (b + 1) * (G + 1));
    s.run();
    EXPECT_EQ(s.n_acc[0], acc1[b]);
    EXPECT_EQ(std::vector<int32_t>(out1.begin() + b * (G + 1), out1.begin() + (b + 1) * (G + 1)), s.out);
  }
  // Other uniforms change the outcome somewhere (the test would notice ignored uniforms).
  for (auto& x : c.u) x = rng.uniform();
  c.run();
  EXPECT_NE(c.out, out1);
}

// ---- bad input -----------------------------------------------------------------------------

std::string error_of(Case& c) {
  try {
    c.run();
  } catch (const specdec::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(KernelsVerify, BadInputComesBackThroughTheOutputsAsOnCuda) {
  // Two sequences, the second with a draft token outside [0, V) at position 1: the good one is
  // complete, the bad one carries its status in n_accepted and the entry in out[0], exactly what
  // verify_cuda writes (KernelsCuda.VerifyBadInputComesBackThroughTheOutputs compares the two),
  // and check_verify_status names it from those outputs alone.
  for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::block,
                    sk::VerifyMode::tokens_only}) {
    const V row = {0.1f, 0.2f, 0.3f, 0.4f};
    Case c;
    c.batch = 2, c.gamma = 2, c.vocab = 4, c.mode = mode;
    c.draft = {3, 3, /**/ 1, 4}, c.n_draft = {2, 2};
    for (int i = 0; i < 4; ++i) c.q.insert(c.q.end(), row.begin(), row.end());
    for (int i = 0; i < 6; ++i) c.p.insert(c.p.end(), row.begin(), row.end());
    c.u = {0.9, 0.9, 0.5, 0.9, 0.9, 0.5};  // every mode accepts 3, 3 (tokens_only: y = 3)
    EXPECT_NE(error_of(c).find("draft_tokens[1][1]"), std::string::npos) << error_of(c);
    EXPECT_EQ(c.n_acc, (std::vector<int32_t>{2, math::kBadToken}));
    EXPECT_EQ(c.out, (std::vector<int32_t>{3, 3, mode == sk::VerifyMode::greedy ? 3 : 2, /**/ 1, -1, -1}));
    try {
      sk::check_verify_status(c.n_acc.data(), c.out.data(), 2, 3, "caller");
      ADD_FAILURE() << "no error";
    } catch (const specdec::Error& e) {
      EXPECT_NE(std::string(e.what()).find("caller: draft_tokens[1][1]"), std::string::npos) << e.what();
    }
  }
}

TEST(KernelsVerify, UniformsResolveProbabilitiesBelowTwoToTheMinus24) {
  // p = (0.5, 1e-9, 0.5): token 1 must be drawn exactly for u in a 1e-9 wide interval around
  // 0.5. A float uniform cannot tell 0.5 + 1e-8 from 0.5 (its spacing there is ~6e-8), so with
  // float uniforms token 1 got probability ~4.5e-8 instead of 1e-9; 53-bit uniforms resolve it.
  const V p = {0.5f, 1e-9f, 0.5f};
  const double total = 0.5 + double(1e-9f) + 0.5;
  const std::vector<std::pair<double, int32_t>> cases = {
      {0.5 / total - 1e-10, 0}, {0.5 / total + 1e-10, 1}, {0.5 + 1e-8, 2}, {0.5 - 1e-8, 0}};
  for (const auto& [u, expect] : cases) {
    Case c = one_row(sk::VerifyMode::tokens_only, 0, 3, {}, {}, p, {0.0f});
    c.u = {u};
    c.run();
    EXPECT_EQ(c.out[0], expect) << "u = " << u;
    c.u = {static_cast<float>(u)};  // the same uniform rounded to float: always 0.5, token 1
    c.run();
    EXPECT_EQ(c.out[0], 1) << "float(u) = " << static_cast<float>(u);
  }
}

TEST(KernelsVerify, BadInputNamesTheEntry) {
  const V p = {0.5f, 0.5f, 0, 0, /**/ 0.5f, 0.5f, 0, 0};
  Case c = one_row(sk::VerifyMode::sampling, 1, 4, {1}, {0.5f, 0.5f, 0, 0}, p, {0.5f, 0.5f});
  c.draft = {4};
  EXPECT_NE(error_of(c).find("draft_tokens[0][0]"), std::string::npos) << error_of(c);
  c.draft = {1};
  c.n_draft = {2};
  EXPECT_NE(error_of(c).find("n_draft[0] = 2"), std::string::npos) << error_of(c);
  c.n_draft = {1};
  c.u = {0.5f, std::nanf("")};
  EXPECT_NE(error_of(c).find("uniforms[0][1]"), std::string::npos) << error_of(c);
  c.u = {-0.1f, 0.5f};
  EXPECT_NE(error_of(c).find("uniforms[0][0]"), std::string::npos) << error_of(c);
  c.u = {0.5f, 0.5f};
  c.p = {0.5f, 0.5f, 0, 0, /**/ 0, 0, 0, 0};  // bonus row has no mass
  EXPECT_NE(error_of(c).find("p[0][1] has no positive probability"), std::string::npos) << error_of(c);
  c.p = {0.5f, 0.5f, 0, 0, /**/ 0.5f, std::nanf(""), 0, 0};  // NaN is never sampled
  EXPECT_NE(error_of(c).find("p[0][1] has no positive probability to sample from (or holds NaN)"), std::string::npos)
      << error_of(c);
  c.p = p;
  c.q.clear();
  EXPECT_NE(error_of(c).find("needs q"), std::string::npos) << error_of(c);
  c.mode = sk::VerifyMode::tokens_only;
  c.u.clear();
  EXPECT_NE(error_of(c).find("needs uniforms"), std::string::npos) << error_of(c);
  c.mode = sk::VerifyMode::greedy;  // greedy needs neither q nor uniforms
  EXPECT_EQ(error_of(c), "(no error)");
  c.vocab = 0;
  EXPECT_NE(error_of(c).find("vocab = 0"), std::string::npos) << error_of(c);
}

// ---- token choice (pick_cpu; pick_cuda runs the same row ops: test_kernels_cuda) -------------

std::vector<int64_t> pick(const std::vector<float>& scores, int64_t vocab, const std::vector<double>& u = {}) {
  sk::PickArgs a;
  a.rows = static_cast<int64_t>(scores.size()) / vocab;
  a.vocab = vocab;
  a.scores = scores.data();
  a.uniforms = u.empty() ? nullptr : u.data();
  std::vector<int64_t> out(a.rows, -9);
  a.out_tokens = out.data();
  sk::pick_cpu(a);
  return out;
}

TEST(KernelsPick, ArgmaxTakesTheLowestIdOfATieAndRanksNaNLast) {
  const float nan = std::nanf("");
  const std::vector<float> rows = {1, 3, 3, 2,    // tie: the lower id
                                   nan, -5, -4, nan,  // NaN ranks as -inf
                                   0, 0, 0, 0};
  EXPECT_EQ(pick(rows, 4), (std::vector<int64_t>{1, 2, 0}));
}

TEST(KernelsPick, DrawsFollowTheLanesInverseCdf) {
  // Below 256 entries every token is a lane of its own: the draw is the plain inverse CDF.
  const std::vector<float> p = {0.1f, 0.2f, 0.0f, 0.3f, 0.4f};
  EXPECT_EQ(pick({p.begin(), p.end()}, 5, {0.05}), std::vector<int64_t>{0});
  EXPECT_EQ(pick(p, 5, {0.25}), std::vector<int64_t>{1});
  EXPECT_EQ(pick(p, 5, {0.35}), std::vector<int64_t>{3});  // token 2 has no mass
  EXPECT_EQ(pick(p, 5, {0.95}), std::vector<int64_t>{4});
  // Above 256 the CDF walks lane 0 (tokens 0, 256, 512, ...), then lane 1, ...: here the mass
  // sits on tokens 3, 256 and 300 (lanes 3, 0 and 44), so the walk meets 256, 3, 300 in turn.
  // Each uniform below lands in the middle of one token's interval.
  const int64_t V = 600;
  std::vector<float> wide(V, 0.0f);
  wide[3] = 0.5f, wide[256] = 0.25f, wide[300] = 0.25f;
  EXPECT_EQ(pick(wide, V, {0.125}), std::vector<int64_t>{256});
  EXPECT_EQ(pick(wide, V, {0.5}), std::vector<int64_t>{3});
  EXPECT_EQ(pick(wide, V, {0.875}), std::vector<int64_t>{300});
  // Rows are independent: two rows, two uniforms.
  std::vector<float> two = wide;
  two.insert(two.end(), wide.begin(), wide.end());
  EXPECT_EQ(pick(two, V, {0.875, 0.125}), (std::vector<int64_t>{300, 256}));
  // It is the verification kernels' draw: CpuRowOps::sample on the same row and uniform.
  const specdec::kernels::cpu::CpuRowOps ops;
  specdec::Rng rng(5);
  std::vector<float> r(1000);
  for (float& x : r) x = static_cast<float>(rng.uniform());
  for (int i = 0; i < 20; ++i) {
    const double u = rng.uniform();
    EXPECT_EQ(pick(r, 1000, {u})[0], ops.sample(r.data(), nullptr, 1000, u)) << u;
  }
}

TEST(KernelsPick, ARowWithoutMassIsMinusOneAndBadArgumentsAreNamed) {
  const float nan = std::nanf("");
  EXPECT_EQ(pick({0, 0, 0, 0, nan, nan, nan, nan}, 4, {0.5, 0.5}), (std::vector<int64_t>{-1, -1}));
  const std::vector<float> row = {0.5f, 0.5f};
  try {
    pick(row, 2, {1.0});
    ADD_FAILURE() << "a uniform of 1 was taken";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("uniforms[0] = 1"), std::string::npos) << e.what();
  }
  sk::PickArgs a;
  a.rows = 1, a.vocab = 2;  // no scores, no outputs
  try {
    sk::pick_cpu(a);
    ADD_FAILURE() << "null pointers were taken";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scores [rows, V]"), std::string::npos) << e.what();
  }
}

}  // namespace test_kernels_verify
