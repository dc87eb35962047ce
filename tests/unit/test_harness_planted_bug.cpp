// The self-check's wrapping backend (harness/planted_bug.h): it changes exactly the
// correction token of a rejected round, as documented, and nothing else.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "harness/planted_bug.h"

namespace sk = specdec::kernels;
using T = std::vector<int32_t>;
using V = std::vector<float>;

namespace {

// One chain of gamma = 2 over a vocabulary of 2 (Sun et al.'s example): p = (1/3, 2/3) at every
// position, q = (2/3, 1/3). With draft (0, 0) and u = (0.9, ...) position 0 rejects token 0:
// its residual norm(max(0, p - q)) = (0, 1) can only give token 1, while p itself gives token
// 0 for the final uniform 0.1.
struct Round {
  sk::VerifyMode mode = sk::VerifyMode::sampling;
  T draft = {0, 0};
  V q = {2 / 3.f, 1 / 3.f, 2 / 3.f, 1 / 3.f};
  V p = {1 / 3.f, 2 / 3.f, 1 / 3.f, 2 / 3.f, 1 / 3.f, 2 / 3.f};
  std::vector<double> u = {0.9, 0.9, 0.1};
  int32_t n_acc = -7;
  T out = T(3, -7);

  T run(sk::Backend& backend) {
    const int32_t n_draft = 2;
    sk::VerifyArgs a;
    a.gamma = 2, a.vocab = 2, a.mode = mode;
    a.draft_tokens = draft.data(), a.n_draft = &n_draft;
    a.q = mode == sk::VerifyMode::sampling || mode == sk::VerifyMode::block ? q.data() : nullptr;
    a.p = p.data(), a.uniforms = u.data();
    a.n_accepted = &n_acc, a.out_tokens = out.data();
    backend.verify(a);
    return out;
  }
};

}  // namespace

TEST(HarnessPlantedBug, SamplingAndBlockTakeTheCorrectionFromP) {
  const auto cpu = sk::backend_for(sk::Device{});
  const auto bug = specdec::harness::residual_bug_backend(cpu);
  for (auto mode : {sk::VerifyMode::sampling, sk::VerifyMode::block}) {
    Round r;
    r.mode = mode;
    EXPECT_EQ(r.run(*cpu), (T{1, -1, -1})) << "real backend, residual token";
    EXPECT_EQ(r.run(*bug), (T{0, -1, -1})) << "planted: the token p gives for u = 0.1";
    EXPECT_EQ(r.n_acc, 0);
  }
}

TEST(HarnessPlantedBug, GreedyAndTokensOnlyKeepTheRejectedDraftToken) {
  const auto cpu = sk::backend_for(sk::Device{});
  const auto bug = specdec::harness::residual_bug_backend(cpu);
  for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::tokens_only}) {
    Round r;
    r.mode = mode;
    r.u = {0.9f, 0.9f, 0.9f};  // tokens_only: y_0 = 1 != draft 0
    EXPECT_EQ(r.run(*cpu), (T{1, -1, -1}));
    EXPECT_EQ(r.run(*bug), (T{0, -1, -1}));
  }
}

TEST(HarnessPlantedBug, FullyAcceptedRoundsAreUntouched) {
  const auto cpu = sk::backend_for(sk::Device{});
  const auto bug = specdec::harness::residual_bug_backend(cpu);
  Round r;
  r.draft = {1, 1};
  r.u = {0.1f, 0.1f, 0.5f};  // u q(1) = 0.033 < p(1): both accepted, bonus from p row 2
  const T real = r.run(*cpu);
  EXPECT_EQ(r.n_acc, 2);
  EXPECT_EQ(r.run(*bug), real);
}

TEST(HarnessPlantedBug, TreesAreRefusedByName) {
  const auto bug = specdec::harness::residual_bug_backend(sk::backend_for(sk::Device{}));
  sk::TreeVerifyArgs a;
  try {
    bug->verify_tree(a);
    FAIL() << "expected an error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("checks.inject_residual_bug"), std::string::npos) << e.what();
  }
}
