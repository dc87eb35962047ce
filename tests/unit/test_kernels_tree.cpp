// Token-tree verification (verify_tree_cpu, the same math::verify_tree_row the CUDA kernel
// runs): hand-computed cases on 4-token vocabularies for greedy, tokens_only and sampling
// (multi-step speculative sampling), a chain equal to verify_cpu bit for bit, the CPU ops
// equal to the per-lane (GPU-thread) decomposition, greedy against a naive walk, batch
// determinism and input errors. Distribution checks: test_kernels_tree_stats.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/tree_math.h"

namespace sk = specdec::kernels;
namespace math = specdec::kernels::math;

namespace {

using V = std::vector<float>;
using T = std::vector<int32_t>;

// Owns the buffers of one verify_tree call.
struct TreeCase {
  int64_t batch = 1, max_nodes = 0, vocab = 0;
  sk::VerifyMode mode = sk::VerifyMode::sampling;
  T tokens, parents, n_nodes;  // [B, N], [B, N], [B]
  V q, p;                      // [B, N, V], [B, N+1, V]
  std::vector<double> u;       // [B, N+1]
  std::vector<double> scratch; // [B, V]
  T n_acc, path, out;          // [B], [B, N], [B, N+1]

  sk::TreeVerifyArgs args() {
    n_acc.assign(batch, -7);
    path.assign(batch * max_nodes, -7);
    out.assign(batch * (max_nodes + 1), -7);
    scratch.assign(batch * vocab, -1.0);
    sk::TreeVerifyArgs a;
    a.batch = batch, a.max_nodes = max_nodes, a.vocab = vocab, a.mode = mode;
    a.tokens = tokens.empty() ? nullptr : tokens.data();
    a.parents = parents.empty() ? nullptr : parents.data();
    a.n_nodes = n_nodes.empty() ? nullptr : n_nodes.data();
    a.q = q.empty() ? nullptr : q.data();
    a.p = p.data();
    a.uniforms = u.empty() ? nullptr : u.data();
    a.scratch = scratch.data();
    a.n_accepted = n_acc.data(), a.path = path.data(), a.out_tokens = out.data();
    return a;
  }
  void run() { sk::verify_tree_cpu(args()); }
};

TreeCase one_tree(sk::VerifyMode mode, int64_t vocab, T tokens, T parents, V q, V p, V u) {
  TreeCase c;
  c.max_nodes = static_cast<int64_t>(tokens.size()), c.vocab = vocab, c.mode = mode;
  c.n_nodes = {static_cast<int32_t>(tokens.size())};
  c.tokens = tokens, c.parents = parents, c.q = q, c.p = p, c.u.assign(u.begin(), u.end());
  return c;
}

std::string error_of(TreeCase& c) {
  try {
    c.run();
  } catch (const specdec::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Random rows, optionally peaked (a few dominant tokens, so drafts are often accepted).
void fill_rows(float* rows, int64_t n_rows, int64_t vocab, specdec::Rng& rng, float power) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = rows + r * vocab;
    double s = 0;
    for (int64_t i = 0; i < vocab; ++i) s += (row[i] = std::pow(rng.uniformf(), power));
    for (int64_t i = 0; i < vocab; ++i) row[i] = static_cast<float>(row[i] / s);
  }
}

}  // namespace

// ---- greedy --------------------------------------------------------------------------------

TEST(KernelsTree, GreedyFollowsTheFirstMatchingChild) {
  // Root children: node 0 (token 2), node 1 (token 1), node 2 (token 1). Node 1 has child 3
  // (token 0); node 2 has children 4 (token 3) and 5 (token 0).
  // argmax(row 0) = 1 -> node 1 (the first child with token 1, node 2 is never looked at);
  // argmax(row 2) = 0 -> node 3, a leaf: bonus argmax(row 4) = 2.
  const T tokens = {2, 1, 1, 0, 3, 0}, parents = {-1, -1, -1, 1, 2, 2};
  V p(7 * 4, 0.1f);
  auto peak = [&](int row, int tok) { p[row * 4 + tok] = 0.7f; };
  peak(0, 1), peak(2, 0), peak(4, 2), peak(3, 3), peak(5, 3);
  TreeCase c = one_tree(sk::VerifyMode::greedy, 4, tokens, parents, {}, p, {});
  c.run();
  EXPECT_EQ(c.n_acc[0], 2);
  EXPECT_EQ(c.path, (T{1, 3, -1, -1, -1, -1}));
  EXPECT_EQ(c.out, (T{1, 0, 2, -1, -1, -1, -1}));
  // argmax(row 2) = 3: node 1 has no child with token 3 (node 2's child 4 does, but node 2 was
  // not taken): emit 3 after node 1.
  c.p[2 * 4 + 0] = 0.1f, c.p[2 * 4 + 3] = 0.7f;
  c.run();
  EXPECT_EQ(c.n_acc[0], 1);
  EXPECT_EQ(c.path, (T{1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(c.out, (T{1, 3, -1, -1, -1, -1, -1}));
  // argmax(row 0) = 3: no root child, the argmax is the only token.
  c.p[0 * 4 + 1] = 0.1f, c.p[0 * 4 + 3] = 0.7f;
  c.run();
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out, (T{3, -1, -1, -1, -1, -1, -1}));
}

TEST(KernelsTree, GreedyTiesGoToLowestTokenId) {
  // Tokens 1 and 2 tie in the root row: greedy decoding picks 1, so the child with token 2 is
  // rejected even though it comes first.
  const V p = {0.1f, 0.4f, 0.4f, 0.1f, /**/ 0.25f, 0.25f, 0.25f, 0.25f, /**/ 0.1f, 0.3f, 0.3f, 0.3f};
  TreeCase c = one_tree(sk::VerifyMode::greedy, 4, {2, 1}, {-1, -1}, {}, p, {});
  c.run();
  EXPECT_EQ(c.path, (T{1, -1}));
  EXPECT_EQ(c.out, (T{1, 1, -1}));  // bonus: three-way tie in row 2 -> token 1
}

// ---- tokens_only ---------------------------------------------------------------------------

TEST(KernelsTree, TokensOnlySamplesEachRowOnce) {
  // Nodes: 0 (token 2, root child), 1 (token 3, root child), 2 (token 0, child of 0).
  // y ~ row 0 = uniform at u0 = 0.6 -> 2 -> node 0; y ~ row 1 = (.7 .1 .1 .1) at u1 = 0.5 -> 0
  // -> node 2, a leaf: bonus ~ row 3 = (0 0 0 1) at u[N] = u3 -> 3.
  const V p = {0.25f, 0.25f, 0.25f, 0.25f, /**/ 0.7f, 0.1f, 0.1f, 0.1f, /**/ 0.5f, 0.5f, 0.0f, 0.0f,
               /**/ 0.0f, 0.0f, 0.0f, 1.0f};
  TreeCase c = one_tree(sk::VerifyMode::tokens_only, 4, {2, 3, 0}, {-1, -1, 0}, {}, p, {0.6f, 0.5f, 0.1f, 0.3f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 2);
  EXPECT_EQ(c.path, (T{0, 2, -1}));
  EXPECT_EQ(c.out, (T{2, 0, 3, -1}));
  // u1 = 0.95 -> y = 3: node 0 has no child with token 3, so 3 is emitted.
  c.u[1] = 0.95f;
  c.run();
  EXPECT_EQ(c.path, (T{0, -1, -1}));
  EXPECT_EQ(c.out, (T{2, 3, -1, -1}));
  // u0 = 0.9 -> y = 3 -> node 1, a leaf whose row is 2 = (.5 .5 0 0): its bonus uses
  // u[N] = 0.7 (-> token 1), not u2 = 0.1 (-> token 0).
  c.u = {0.9f, 0.5f, 0.1f, 0.7f};
  c.run();
  EXPECT_EQ(c.path, (T{1, -1, -1}));
  EXPECT_EQ(c.out, (T{3, 1, -1, -1}));
}

// ---- sampling (multi-step speculative sampling) -------------------------------------------

TEST(KernelsTree, SamplingTriesSiblingsAgainstTheRunningResidual) {
  // Root row p = (.1 .2 .3 .4). Node 0: token 3, q0 = (.1 .1 .1 .7): 3 is accepted iff
  // u0 * .7 < .4. At u0 = 0.9 it is rejected and r = max(0, p - q0) = (0 .1 .2 0), z = .3.
  // Node 1: token 2, q1 uniform: accepted iff u1 * .25 * .3 < .2, i.e. always -> node 1, a
  // leaf: bonus from row 2 = (0 0 1 0).
  const V q = {0.1f, 0.1f, 0.1f, 0.7f, /**/ 0.25f, 0.25f, 0.25f, 0.25f};
  const V p = {0.1f, 0.2f, 0.3f, 0.4f, /**/ 1.0f, 0.0f, 0.0f, 0.0f, /**/ 0.0f, 0.0f, 1.0f, 0.0f};
  TreeCase c = one_tree(sk::VerifyMode::sampling, 4, {3, 2}, {-1, -1}, q, p, {0.9f, 0.999f, 0.5f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 1);
  EXPECT_EQ(c.path, (T{1, -1}));
  EXPECT_EQ(c.out, (T{2, 2, -1}));
  // u0 = 0.5: node 0 accepted (.35 < .4), bonus from row 1 -> token 0.
  c.u[0] = 0.5f;
  c.run();
  EXPECT_EQ(c.path, (T{0, -1}));
  EXPECT_EQ(c.out, (T{3, 0, -1}));
  // Node 1 with token 0: r(0) = 0, rejected for every u. The final token ~ norm(max(0, r / z -
  // q1)) = norm(0, 1/12, 5/12, 0) = (0, 1/6, 5/6, 0): u[N] = 0.1 -> 1, u[N] = 0.5 -> 2.
  c.tokens = {3, 0};
  c.u = {0.9f, 0.0f, 0.1f};
  c.run();
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out, (T{1, -1, -1}));
  c.u[2] = 0.5f;
  c.run();
  EXPECT_EQ(c.out, (T{2, -1, -1}));
}

TEST(KernelsTree, SamplingDuplicateSiblingsAndThreeRejections) {
  // Three root children drawn from the same q = (.1 .1 .1 .7), the first two duplicates
  // (token 3), with p = (.1 .2 .3 .4):
  //   node 0 (token 3): u0 = .9, .63 >= .4: rejected; r1 = (0 .1 .2 0), z = .3;
  //   node 1 (token 3): r1(3) = 0: rejected; r2 = max(0, r1 / .3 - q) = (0 .2333 .5667 0), z = .8;
  //   node 2 (token 0): r2(0) = 0: rejected; final ~ norm(max(0, r2 / .8 - q)) =
  //     norm(0, .19167, .60833, 0) = (0, .2396, .7604, 0): u[N] = .2 -> 1, .3 -> 2.
  const V qrow = {0.1f, 0.1f, 0.1f, 0.7f};
  V q;
  for (int i = 0; i < 3; ++i) q.insert(q.end(), qrow.begin(), qrow.end());
  V p = {0.1f, 0.2f, 0.3f, 0.4f};
  for (int i = 0; i < 3; ++i) p.insert(p.end(), {0.25f, 0.25f, 0.25f, 0.25f});
  TreeCase c = one_tree(sk::VerifyMode::sampling, 4, {3, 3, 0}, {-1, -1, -1}, q, p, {0.9f, 0.0f, 0.0f, 0.2f});
  c.run();
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out, (T{1, -1, -1, -1}));
  c.u[3] = 0.3f;
  c.run();
  EXPECT_EQ(c.out, (T{2, -1, -1, -1}));
  // Node 2 with token 1: accepted iff u2 * .1 * .8 < .2333, i.e. always.
  c.tokens[2] = 1;
  c.u[2] = 0.999f;
  c.run();
  EXPECT_EQ(c.path, (T{2, -1, -1}));
  EXPECT_EQ(c.out, (T{1, 1, -1, -1}));  // bonus from row 3 = uniform at u[N] = .3 -> token 1
}

// ---- a chain is a tree ---------------------------------------------------------------------

TEST(KernelsTree, ChainEqualsVerifyBitForBit) {
  // parents[i] = i - 1 turns verify's inputs into a tree; all three shared modes must give
  // verify_cpu's counts and tokens, on ragged lengths and peaked rows (many acceptances).
  const int64_t B = 6, G = 5, Vn = 1000;
  specdec::Rng rng(17);
  int n_deep = 0;  // sequences with at least two accepted nodes
  for (int trial = 0; trial < 4; ++trial) {
    TreeCase c;
    c.batch = B, c.max_nodes = G, c.vocab = Vn;
    c.q.resize(B * G * Vn), c.p.resize(B * (G + 1) * Vn), c.u.resize(B * (G + 1));
    fill_rows(c.q.data(), B * G, Vn, rng, 30.0f);
    fill_rows(c.p.data(), B * (G + 1), Vn, rng, 30.0f);
    // p close to q (0.8 q + 0.2 noise) so that drafts are often accepted.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < G * Vn; ++i) {
        float& x = c.p[b * (G + 1) * Vn + i];
        x = 0.8f * c.q[b * G * Vn + i] + 0.2f * x;
      }
    for (auto& x : c.u) x = rng.uniform();
    c.tokens.resize(B * G), c.parents.resize(B * G), c.n_nodes.resize(B);
    for (int64_t b = 0; b < B; ++b) {
      c.n_nodes[b] = static_cast<int32_t>(rng.next() % (G + 1));
      for (int64_t i = 0; i < G; ++i) {
        // Draft the argmax of q half the time so that some chains are accepted deep.
        const float* qrow = c.q.data() + (b * G + i) * Vn;
        c.tokens[b * G + i] = rng.uniform() < 0.5 ? static_cast<int32_t>(math::argmax_row(qrow, Vn))
                                                  : static_cast<int32_t>(rng.next() % Vn);
        c.parents[b * G + i] = static_cast<int32_t>(i) - 1;
      }
    }
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only}) {
      c.mode = mode;
      c.run();
      T acc_chain(B), out_chain(B * (G + 1));
      sk::VerifyArgs a;
      a.batch = B, a.gamma = G, a.vocab = Vn, a.mode = mode;
      a.draft_tokens = c.tokens.data(), a.n_draft = c.n_nodes.data(), a.q = c.q.data(), a.p = c.p.data();
      a.uniforms = c.u.data(), a.n_accepted = acc_chain.data(), a.out_tokens = out_chain.data();
      sk::verify_cpu(a);
      EXPECT_EQ(c.n_acc, acc_chain) << "mode " << static_cast<int>(mode);
      EXPECT_EQ(c.out, out_chain) << "mode " << static_cast<int>(mode);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < G; ++i) EXPECT_EQ(c.path[b * G + i], i < c.n_acc[b] ? i : -1);
        n_deep += c.n_acc[b] >= 2;
      }
    }
  }
  EXPECT_GT(n_deep, 5);
}

// ---- the CPU code is the GPU code ----------------------------------------------------------

namespace {
// Emulates gpu::GpuRowOps on the host: one lane at a time, then the same serial lane-order
// pick / total the kernel's thread 0 computes.
struct LaneOps {
  int64_t argmax(const float* row, int64_t n) const {
    math::ArgMax a[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) a[l] = math::lane_argmax(row, n, l);
    for (int s = math::kLanes / 2; s > 0; s >>= 1)
      for (int l = 0; l < s; ++l) a[l] = math::argmax_merge(a[l], a[l + s]);
    return a[0].index;
  }
  template <class E>
  int64_t sample(const E* p, const float* q, int64_t n, float u, double s) const {
    double mass[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) mass[l] = math::lane_mass(p, q, n, l, s);
    const math::LanePick pick = math::pick_lane(mass, u);
    return pick.lane < 0 ? -1 : math::scan_lane(p, q, n, pick.lane, pick.remaining, s);
  }
  template <class E>
  double mass(const E* p, const float* q, int64_t n, double s) const {
    double lanes[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) lanes[l] = math::lane_mass(p, q, n, l, s);
    return math::lane_total(lanes);
  }
  template <class E>
  double materialize(const E* p, const float* q, int64_t n, double s, double* dst) const {
    double lanes[math::kLanes];
    for (int l = 0; l < math::kLanes; ++l) lanes[l] = math::lane_materialize(p, q, n, l, s, dst);
    return math::lane_total(lanes);
  }
};

// A random tree of n nodes in topological order: each node's parent is uniform among the
// root and the earlier nodes, biased to few levels so that siblings are common.
void random_tree(int32_t* parents, int32_t n, specdec::Rng& rng) {
  for (int32_t i = 0; i < n; ++i) parents[i] = rng.uniform() < 0.3 ? -1 : static_cast<int32_t>(rng.next() % (i + 1)) - 1;
}
}  // namespace

TEST(KernelsTree, CpuOpsAndLaneOpsGiveIdenticalDecisions) {
  // verify_tree_row with the CPU ops and the per-lane ops on random trees (V = 5000, siblings
  // drafted from their q rows), all three modes: identical paths, tokens and scratch.
  const int64_t N = 12, Vn = 5000;
  specdec::Rng rng(9);
  int n_materialised = 0;
  for (int trial = 0; trial < 10; ++trial) {
    V q(N * Vn), p((N + 1) * Vn);
    std::vector<double> u(N + 1);
    fill_rows(q.data(), N, Vn, rng, 20.0f);
    fill_rows(p.data(), N + 1, Vn, rng, 20.0f);
    for (auto& x : u) x = rng.uniform();
    T parents(N), tokens(N);
    random_tree(parents.data(), N, rng);
    for (int64_t i = 0; i < N; ++i) {
      // Half the nodes carry their q row's argmax (often accepted), the rest random tokens.
      tokens[i] = static_cast<int32_t>(rng.uniform() < 0.5 ? math::argmax_row(q.data() + i * Vn, Vn) : rng.next() % Vn);
    }
    for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only}) {
      std::vector<double> scratch_cpu(Vn, 0.0), scratch_lane(Vn, 0.0);
      math::TreeView t;
      t.max_nodes = N, t.n_vocab = Vn, t.mode = mode, t.tokens = tokens.data(), t.parents = parents.data();
      t.n_nodes = static_cast<int32_t>(N), t.q = q.data(), t.p = p.data(), t.u = u.data();
      specdec::kernels::cpu::CpuRowOps cpu;
      LaneOps lane;
      t.scratch = scratch_cpu.data();
      const math::TreeResult a = math::verify_tree_row(t, cpu);
      t.scratch = scratch_lane.data();
      const math::TreeResult b = math::verify_tree_row(t, lane);
      ASSERT_EQ(a.status, math::kRowOk);
      EXPECT_EQ(a.n_accepted, b.n_accepted);
      EXPECT_EQ(a.last_node, b.last_node);
      EXPECT_EQ(a.next_token, b.next_token);
      EXPECT_EQ(scratch_cpu, scratch_lane);
      n_materialised += scratch_cpu != std::vector<double>(Vn, 0.0);
    }
  }
  EXPECT_GT(n_materialised, 3);  // the in-place residual update was exercised
}

// ---- greedy against a naive walk -------------------------------------------------------------

namespace {
// The first maximum, NaN ignored (torch.argmax on NaN-free rows).
int32_t naive_argmax(const float* row, int64_t n) {
  int32_t y = -1;
  for (int32_t k = 0; k < n; ++k)
    if (!std::isnan(row[k]) && (y < 0 || row[k] > row[y])) y = k;
  return y;
}
}  // namespace

// The greedy walk of one tree: path and out as verify_tree writes them.
struct Walk {
  T path, out;
};

Walk naive_greedy_walk(const TreeCase& c) {
  const int64_t N = c.max_nodes, Vn = c.vocab;
  Walk w;
  int32_t node = -1;
  for (;;) {
    const int32_t y = naive_argmax(c.p.data() + (node + 1) * Vn, Vn);
    int32_t child = -1;
    for (int32_t j = node + 1; j < c.n_nodes[0] && child < 0; ++j)
      if (c.parents[j] == node && c.tokens[j] == y) child = j;
    w.out.push_back(child < 0 ? y : c.tokens[child]);
    if (child < 0) break;
    w.path.push_back(child);
    node = child;
  }
  w.path.resize(N, -1), w.out.resize(N + 1, -1);
  return w;
}

// Random greedy trees against the naive walk: rows with few distinct values (many ties,
// some NaN), nodes that mostly carry the argmax of the row they answer (deep paths),
// sometimes its last maximum (a tie that must be rejected), else a random token. Returns the
// number of trees (of 50) on which `walk` disagrees with the naive walk.
int greedy_mismatches(const std::function<Walk(const TreeCase&)>& walk, int* n_deep) {
  const int64_t N = 20, Vn = 300;
  specdec::Rng rng(31);
  int mismatches = 0;
  for (int trial = 0; trial < 50; ++trial) {
    TreeCase c;
    c.max_nodes = N, c.vocab = Vn, c.mode = sk::VerifyMode::greedy;
    c.p.resize((N + 1) * Vn);
    for (auto& x : c.p) x = rng.uniform() < 0.01 ? std::nanf("") : static_cast<float>(rng.next() % 4);
    c.n_nodes = {static_cast<int32_t>(rng.next() % (N + 1))};
    c.parents.resize(N), c.tokens.resize(N);
    random_tree(c.parents.data(), N, rng);
    for (int64_t i = 0; i < N; ++i) {
      const float* row = c.p.data() + (c.parents[i] + 1) * Vn;
      const int32_t first_max = naive_argmax(row, Vn);
      int32_t last_max = first_max;
      for (int32_t k = 0; k < Vn; ++k)
        if (row[k] == row[first_max]) last_max = k;
      const double r = rng.uniform();
      c.tokens[i] = r < 0.6 ? first_max : r < 0.8 ? last_max : static_cast<int32_t>(rng.next() % Vn);
    }
    const Walk expect = naive_greedy_walk(c), got = walk(c);
    mismatches += got.path != expect.path || got.out != expect.out;
    *n_deep += expect.path.size() >= 2 && expect.path[1] >= 0;
  }
  return mismatches;
}

// Planted bug (test-only Ops): greedy ties go to the highest token id.
struct HighestTieOps : specdec::kernels::cpu::CpuRowOps {
  int64_t argmax(const float* row, int64_t n) const {
    int64_t y = -1;
    for (int64_t k = 0; k < n; ++k)
      if (!std::isnan(row[k]) && (y < 0 || row[k] >= row[y])) y = k;
    return y;
  }
};

TEST(KernelsTree, GreedyMatchesNaiveWalkOnRandomTrees) {
  int n_deep = 0;
  const int bad = greedy_mismatches(
      [](const TreeCase& c) {
        TreeCase r = c;
        r.run();
        return Walk{r.path, r.out};
      },
      &n_deep);
  EXPECT_EQ(bad, 0);
  EXPECT_GT(n_deep, 10);  // walks that accepted at least two nodes
  // The same check catches the planted tie bug on most trees.
  const int bad_ties = greedy_mismatches(
      [](const TreeCase& c) {
        TreeCase r = c;
        const sk::TreeVerifyArgs a = r.args();
        const math::TreeView t = math::tree_view(a, 0);
        HighestTieOps ops;
        const math::TreeResult res = math::verify_tree_row(t, ops);
        math::write_tree_output(t, res, r.path.data(), r.out.data());
        return Walk{r.path, r.out};
      },
      &n_deep);
  EXPECT_GT(bad_ties, 25);
}

// ---- batch -----------------------------------------------------------------------------------

TEST(KernelsTree, BatchRowsAreIndependent) {
  // B = 8 ragged trees, V = 9000 (large enough for the parallel split): each sequence alone
  // gives the same answer as in the batch, and its scratch row is its own.
  const int64_t B = 8, N = 10, Vn = 9000;
  specdec::Rng rng(44);
  TreeCase c;
  c.batch = B, c.max_nodes = N, c.vocab = Vn, c.mode = sk::VerifyMode::sampling;
  c.q.resize(B * N * Vn), c.p.resize(B * (N + 1) * Vn), c.u.resize(B * (N + 1));
  fill_rows(c.q.data(), B * N, Vn, rng, 20.0f);
  fill_rows(c.p.data(), B * (N + 1), Vn, rng, 20.0f);
  for (auto& x : c.u) x = rng.uniform();
  c.tokens.resize(B * N), c.parents.resize(B * N), c.n_nodes.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    c.n_nodes[b] = static_cast<int32_t>(rng.next() % (N + 1));
    random_tree(c.parents.data() + b * N, N, rng);
    for (int64_t i = 0; i < N; ++i)
      c.tokens[b * N + i] = static_cast<int32_t>(math::argmax_row(c.q.data() + (b * N + i) * Vn, Vn));
  }
  for (auto mode : {sk::VerifyMode::greedy, sk::VerifyMode::sampling, sk::VerifyMode::tokens_only}) {
    c.mode = mode;
    c.run();
    const T acc = c.n_acc, path = c.path, out = c.out;
    for (int64_t b = 0; b < B; ++b) {
      TreeCase s;
      s.max_nodes = N, s.vocab = Vn, s.mode = mode;
      s.tokens.assign(c.tokens.begin() + b * N, c.tokens.begin() + (b + 1) * N);
      s.parents.assign(c.parents.begin() + b * N, c.parents.begin() + (b + 1) * N);
      s.n_nodes = {c.n_nodes[b]};
      s.q.assign(c.q.begin() + b * N * Vn, c.q.begin() + (b + 1) * N * Vn);
      s.p.assign(c.p.begin() + b * (N + 1) * Vn, c.p.begin() + (b + 1) * (N + 1) * Vn);
      s.u.assign(c.u.begin() + b * (N + 1), c.u.begin() + (b + 1) * (N + 1));
      s.run();
      EXPECT_EQ(s.n_acc[0], acc[b]);
      EXPECT_EQ(s.path, T(path.begin() + b * N, path.begin() + (b + 1) * N));
      EXPECT_EQ(s.out, T(out.begin() + b * (N + 1), out.begin() + (b + 1) * (N + 1)));
    }
  }
}

// ---- bad input -------------------------------------------------------------------------------

TEST(KernelsTree, BadInputNamesTheEntry) {
  const V q = {0.5f, 0.5f, 0, 0, /**/ 0.5f, 0.5f, 0, 0};
  const V p = {0.5f, 0.5f, 0, 0, /**/ 0.5f, 0.5f, 0, 0, /**/ 0.5f, 0.5f, 0, 0};
  TreeCase c = one_tree(sk::VerifyMode::sampling, 4, {1, 0}, {-1, 0}, q, p, {0.5f, 0.5f, 0.5f});
  EXPECT_EQ(error_of(c), "(no error)");
  c.parents = {-1, 1};
  EXPECT_NE(error_of(c).find("parents[0][1] is outside [-1, 1)"), std::string::npos) << error_of(c);
  c.parents = {-2, -1};
  EXPECT_NE(error_of(c).find("parents[0][0]"), std::string::npos) << error_of(c);
  c.parents = {-1, 0};
  c.tokens = {1, 4};
  EXPECT_NE(error_of(c).find("tokens[0][1] is outside [0, vocab)"), std::string::npos) << error_of(c);
  c.tokens = {1, -1};
  EXPECT_NE(error_of(c).find("tokens[0][1]"), std::string::npos) << error_of(c);
  c.tokens = {1, 0};
  c.n_nodes = {3};
  EXPECT_NE(error_of(c).find("n_nodes[0] = 3"), std::string::npos) << error_of(c);
  c.n_nodes = {2};
  c.u = {0.5f, std::nanf(""), 0.5f};
  EXPECT_NE(error_of(c).find("uniforms[0][1]"), std::string::npos) << error_of(c);
  c.u = {0.5f, 0.5f, 1.01f};
  EXPECT_NE(error_of(c).find("uniforms[0][2]"), std::string::npos) << error_of(c);
  c.u = {0.5f, 0.5f, 0.5f};
  c.p = {0.5f, 0.5f, 0, 0, /**/ 0.5f, 0.5f, 0, 0, /**/ 0, 0, 0, 0};  // node 1's row (the bonus) is empty
  EXPECT_NE(error_of(c).find("p[0][2]"), std::string::npos) << error_of(c);
  // The status is also in n_accepted and the entry in out[0], as the CUDA kernel writes them.
  EXPECT_EQ(c.n_acc[0], math::kNoMass);
  EXPECT_EQ(c.out, (T{2, -1, -1}));
  EXPECT_EQ(c.path, (T{-1, -1}));
  c.p = p;
  c.mode = sk::VerifyMode::block;
  EXPECT_NE(error_of(c).find("mode block is not defined for trees"), std::string::npos) << error_of(c);
  c.mode = sk::VerifyMode::sampling;
  sk::TreeVerifyArgs a = c.args();
  a.scratch = nullptr;
  EXPECT_THROW(sk::verify_tree_cpu(a), specdec::Error);
  a = c.args();
  a.q = nullptr;
  EXPECT_THROW(sk::verify_tree_cpu(a), specdec::Error);
  a = c.args();
  a.mode = sk::VerifyMode::tokens_only, a.uniforms = nullptr;
  try {
    sk::verify_tree_cpu(a);
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens_only mode needs uniforms"), std::string::npos) << e.what();
  }
  a.mode = sk::VerifyMode::greedy, a.q = nullptr, a.scratch = nullptr;  // greedy needs none of them
  EXPECT_NO_THROW(sk::verify_tree_cpu(a));
  a.vocab = 0;
  EXPECT_THROW(sk::verify_tree_cpu(a), specdec::Error);
}

TEST(KernelsTree, EmptyTreeIsABonusSample) {
  // N = 0: only the root row; path may be null.
  TreeCase c = one_tree(sk::VerifyMode::sampling, 4, {}, {}, {}, {0.0f, 0.0f, 1.0f, 0.0f}, {0.3f});
  c.n_nodes.clear();
  sk::TreeVerifyArgs a = c.args();
  a.path = nullptr;
  sk::verify_tree_cpu(a);
  EXPECT_EQ(c.n_acc[0], 0);
  EXPECT_EQ(c.out, (T{2}));
}
