// Block verification (VerifyMode::block, Sun et al. 2025) in the chain kernel: hand-computed
// cases on 2-3 token vocabularies, its edge cases and errors. The distribution checks are in
// test_kernels_block_stats.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"

namespace sk = specdec::kernels;

namespace {

using V = std::vector<float>;
using T = std::vector<int32_t>;

// One sequence through verify_cpu.
struct Chain {
  int64_t gamma = 0, vocab = 0;
  sk::VerifyMode mode = sk::VerifyMode::block;
  T draft;
  V q, p;  // [gamma, V], [gamma+1, V]
  std::vector<double> u;  // [gamma+1]
  int32_t n_acc = -7;
  T out;

  void run() {
    T n_draft = {static_cast<int32_t>(draft.size())};
    T d = draft;
    d.resize(gamma, 0);
    out.assign(gamma + 1, -7);
    sk::VerifyArgs a;
    a.gamma = gamma, a.vocab = vocab, a.mode = mode;
    a.draft_tokens = d.data(), a.n_draft = n_draft.data();
    a.q = q.empty() ? nullptr : q.data();
    a.p = p.data();
    a.uniforms = u.empty() ? nullptr : u.data();
    a.n_accepted = &n_acc, a.out_tokens = out.data();
    sk::verify_cpu(a);
  }
};

// The motivating example of Sun et al. (2025): context-free p = (1/3, 2/3),
// q = (2/3, 1/3), gamma = 2. In float, 2/3 is exactly twice 1/3, so the ratios below are exact.
Chain paper_example(T draft, V u) {
  Chain c;
  c.gamma = 2, c.vocab = 2, c.draft = draft, c.u.assign(u.begin(), u.end());
  const float a = 1.0f / 3.0f, b = 2.0f / 3.0f;
  c.q = {b, a, /**/ b, a};
  c.p = {a, b, /**/ a, b, /**/ a, b};
  return c;
}

}  // namespace

TEST(KernelsBlock, JointAcceptanceWhereTokenWiseRejects) {
  // Draft (a, b): w1 = min(1, (1/3)/(2/3)) = 1/2, w2 = min(1, 1/2 * (2/3)/(1/3)) = 1, so h2 = 1:
  // the block is accepted for every u and the bonus comes from p3 (u = 0.2 -> a, 0.5 -> b).
  // Token-wise verification rejects x1 = a at u1 = 0.7 (> 1/2) and resamples max(0, p - q) = b.
  Chain c = paper_example({0, 1}, {0.7f, 0.99f, 0.2f});
  c.run();
  EXPECT_EQ(c.n_acc, 2);
  EXPECT_EQ(c.out, (T{0, 1, 0}));
  c.u[2] = 0.5f;
  c.run();
  EXPECT_EQ(c.out, (T{0, 1, 1}));
  c.mode = sk::VerifyMode::sampling;
  c.run();
  EXPECT_EQ(c.n_acc, 0);
  EXPECT_EQ(c.out, (T{1, -1, -1}));
}

TEST(KernelsBlock, WalksFromTheLongestPrefixDown) {
  // Draft (a, a): w1 = 1/2, w2 = 1/4 = h2. S1 = sum max(0, w1 p2 - q2) = max(0, 1/6 - 2/3) +
  // max(0, 1/3 - 1/3) = 0, so h1 = 0: tau = 2 iff u2 < 1/4, else tau = 0 with the token-wise
  // residual max(0, p1 - q1) = (0, 1/3) -> b.
  Chain c = paper_example({0, 0}, {0.0f, 0.2f, 0.5f});
  c.run();
  EXPECT_EQ(c.n_acc, 2);
  EXPECT_EQ(c.out, (T{0, 0, 1}));
  c.u = {0.0f, 0.3f, 0.1f};  // u1 = 0 does not accept h1 = 0 (its residual is empty)
  c.run();
  EXPECT_EQ(c.n_acc, 0);
  EXPECT_EQ(c.out, (T{1, -1, -1}));
  // Draft (b, a): w1 = 1, w2 = 1/2 = h2; S1 = 1/3 and 1 - w1 = 0, so h1 = 1: tau >= 1 always.
  // tau = 1 (u2 = 0.6): the residual max(0, 1 * p2 - q2) = (0, 1/3) -> b.
  c.draft = {1, 0};
  c.u = {0.99f, 0.6f, 0.1f};
  c.run();
  EXPECT_EQ(c.n_acc, 1);
  EXPECT_EQ(c.out, (T{1, 1, -1}));
  c.u[1] = 0.4f;
  c.run();
  EXPECT_EQ(c.n_acc, 2);
  EXPECT_EQ(c.out, (T{1, 0, 0}));  // bonus from p3 at u = 0.1
}

TEST(KernelsBlock, ResidualIsScaledByTheBlockWeight) {
  // V = 3, gamma = 2. x1 = 0: w1 = 0.25 / 0.5 = 1/2. Next rows p2 = (.6 .3 .1),
  // q2 = (.2 .25 .55): S1 = max(0, .3 - .2) = .1, h1 = .1 / (.1 + 1/2) = 1/6. x2 = 1:
  // w2 = min(1, 1/2 * .3 / .25) = .6 = h2. With u2 = 0.9 (> .6) and u1 = 0.1 (< 1/6), tau = 1
  // and the next token ~ norm(max(0, w1 p2 - q2)) = (1, 0, 0) for every u: token 0. The
  // unscaled residual max(0, p2 - q2) = (.4 .05 0) would give token 1 at u = 0.95.
  Chain c;
  c.gamma = 2, c.vocab = 3, c.draft = {0, 1};
  c.q = {0.5f, 0.25f, 0.25f, /**/ 0.2f, 0.25f, 0.55f};
  c.p = {0.25f, 0.5f, 0.25f, /**/ 0.6f, 0.3f, 0.1f, /**/ 0.0f, 0.0f, 1.0f};
  c.u = {0.1f, 0.9f, 0.95f};
  c.run();
  EXPECT_EQ(c.n_acc, 1);
  EXPECT_EQ(c.out, (T{0, 0, -1}));
  // u1 = 0.2 (> 1/6): tau = 0, token-wise residual max(0, p1 - q1) = (0 .25 0) -> token 1.
  c.u[0] = 0.2f;
  c.run();
  EXPECT_EQ(c.n_acc, 0);
  EXPECT_EQ(c.out, (T{1, -1, -1}));
  // u2 = 0.5 (< .6): the whole block, bonus from p3 = token 2.
  c.u = {0.99f, 0.5f, 0.3f};
  c.run();
  EXPECT_EQ(c.n_acc, 2);
  EXPECT_EQ(c.out, (T{0, 1, 2}));
}

TEST(KernelsBlock, EdgeCases) {
  // p(x1) = 0: w1 = 0, every later weight is 0 and no prefix can be accepted, not even with
  // u = 0; the residual at tau = 0 is token-wise: max(0, p1 - q1) = (0 .25 .25) -> token 1.
  Chain c;
  c.gamma = 2, c.vocab = 3, c.draft = {0, 1};
  c.q = {0.5f, 0.25f, 0.25f, /**/ 0.2f, 0.4f, 0.4f};
  c.p = {0.0f, 0.5f, 0.5f, /**/ 0.2f, 0.4f, 0.4f, /**/ 1.0f, 0.0f, 0.0f};
  c.u = {0.0f, 0.0f, 0.1f};
  c.run();
  EXPECT_EQ(c.n_acc, 0);
  EXPECT_EQ(c.out, (T{1, -1, -1}));
  // q(x) = 0 < p(x) gives w1 = 1; p2 == q2 keeps w2 = 1: accepted even at u = 1. This is also
  // the 0/0 case of h1 (S1 = 0 and 1 - w1 = 0), never reached because h2 = w2 = 1 stops first.
  c.draft = {1, 2};
  c.q = {0.5f, 0.0f, 0.5f, /**/ 0.2f, 0.4f, 0.4f};
  c.p = {0.0f, 0.5f, 0.5f, /**/ 0.2f, 0.4f, 0.4f, /**/ 1.0f, 0.0f, 0.0f};
  c.u = {1.0f, 1.0f, 0.5f};
  c.run();
  EXPECT_EQ(c.n_acc, 2);
  EXPECT_EQ(c.out, (T{1, 2, 0}));
  // A ragged draft of one token: h1 = w1 = .5 / .5 = 1; the bonus comes from p[n_draft].
  c.draft = {2};
  c.run();
  EXPECT_EQ(c.n_acc, 1);
  EXPECT_EQ(c.out, (T{2, 1, -1}));  // bonus from p2 = (.2 .4 .4) at u = 0.5
  // No draft: a bonus sample of p1.
  c.draft = {};
  c.run();
  EXPECT_EQ(c.n_acc, 0);
  EXPECT_EQ(c.out, (T{2, -1, -1}));
}

TEST(KernelsBlock, SingleTokenDraftEqualsTokenWise) {
  // For n = 1, h1 = w1 = min(1, p/q): block and token-wise verification coincide.
  Chain c;
  c.gamma = 1, c.vocab = 4, c.draft = {1};
  c.q = {0.1f, 0.6f, 0.2f, 0.1f};
  c.p = {0.3f, 0.2f, 0.2f, 0.3f, /**/ 0.25f, 0.25f, 0.25f, 0.25f};
  for (float u0 : {0.1f, 0.3f, 0.34f, 0.5f, 0.9f})
    for (float u1 : {0.0f, 0.3f, 0.7f, 1.0f}) {
      c.u = {u0, u1};
      c.mode = sk::VerifyMode::sampling;
      c.run();
      const T expect = c.out;
      c.mode = sk::VerifyMode::block;
      c.run();
      EXPECT_EQ(c.out, expect) << "u = " << u0 << ", " << u1;
    }
}

TEST(KernelsBlock, RaggedBatchAndErrors) {
  // Ragged drafts in one batch: q = p one-hot on token i + 1 accepts every draft (w = 1) and the
  // bonus reveals the p row used: p[n_draft].
  const int64_t B = 3, G = 3, Vn = 6;
  T n_draft = {0, 2, 3}, draft = {99, 99, 99, /**/ 1, 2, 99, /**/ 1, 2, 3}, n_acc(B), out(B * (G + 1));
  V q(B * G * Vn, 0.0f), p(B * (G + 1) * Vn, 0.0f);
  std::vector<double> u(B * (G + 1), 0.999);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < G; ++i) q[(b * G + i) * Vn + i + 1] = 1.0f;
    for (int64_t i = 0; i <= G; ++i) p[(b * (G + 1) + i) * Vn + i + 1] = 1.0f;
  }
  sk::VerifyArgs a;
  a.batch = B, a.gamma = G, a.vocab = Vn, a.mode = sk::VerifyMode::block;
  a.draft_tokens = draft.data(), a.n_draft = n_draft.data(), a.q = q.data(), a.p = p.data();
  a.uniforms = u.data(), a.n_accepted = n_acc.data(), a.out_tokens = out.data();
  sk::verify_cpu(a);
  EXPECT_EQ(n_acc, (T{0, 2, 3}));
  EXPECT_EQ(out, (T{1, -1, -1, -1, /**/ 1, 2, 3, -1, /**/ 1, 2, 3, 4}));
  auto error_of = [&](sk::VerifyArgs args) -> std::string {
    try {
      sk::verify_cpu(args);
    } catch (const specdec::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  sk::VerifyArgs bad = a;
  bad.q = nullptr;
  EXPECT_NE(error_of(bad).find("block mode needs q"), std::string::npos) << error_of(bad);
  bad = a;
  bad.uniforms = nullptr;
  EXPECT_NE(error_of(bad).find("block mode needs uniforms"), std::string::npos) << error_of(bad);
  u[2 * (G + 1) + 1] = 1.5f;
  EXPECT_NE(error_of(a).find("uniforms[2][1]"), std::string::npos) << error_of(a);
  u[2 * (G + 1) + 1] = 0.5f;
  draft[2 * G + 2] = 6;
  EXPECT_NE(error_of(a).find("draft_tokens[2][2]"), std::string::npos) << error_of(a);
  draft[2 * G + 2] = 3;
  // The row a rejection samples from has no mass: with all of row 0 of p zero, the first
  // draft token has p = 0 and w = 0, tau = 0, and neither the residual nor p1 can be sampled.
  for (int64_t k = 0; k < Vn; ++k) p[(1 * (G + 1) + 0) * Vn + k] = 0.0f;
  EXPECT_NE(error_of(a).find("p[1][0] has no positive probability"), std::string::npos) << error_of(a);
}
