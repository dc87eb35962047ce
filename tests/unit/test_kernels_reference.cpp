// Lossless in every combination, proved exactly, and the kernels held to an independent
// reference draw by draw.
//
// The reference (tests/reference/reference_verifier.h) is written from the papers (token-wise:
// Leviathan et al. 2023, Chen et al. 2023; block: Sun et al. 2025; trees: SpecInfer, Miao et
// al. 2024) and shares no code with kernels/ or src/. Notation: p = target, q = draft.
//
//  1. Exact laws (ExactLaw.*). The reference runs with an enumerating randomness source
//     (tests/reference/exact_enumeration.h): every draft (with its probability under q), every
//     acceptance/rejection and every sampled token is a branch with its exact probability, and
//     each round's output is completed from the target to a fixed length L = max depth + 1
//     (tests/reference/exact_law.h). On toy context-dependent models (V = 3..5, zero-probability
//     corners, ties) and eight logits-processor chains (tests/reference/reference_processors.h)
//     the law of the length-L text equals the target's autoregressive law (TV <= 1e-12) for
//     every chain mode (gamma 1..3) and tree mode (branching [2], [3], [2,1], [2,2]); greedy
//     modes emit the target's greedy text with probability 1; block verification accepts at
//     least as many tokens as token-wise in expectation (Sun et al.'s example exactly: 11/9 vs
//     10/9). No uniform is consumed twice on any path, which makes the branch probabilities the
//     law of the uniform-driven run.
//  2. Draw by draw (DrawByDraw.*). verify_cpu and verify_tree_cpu return exactly the reference's
//     accepted count, tokens and path on the same (p, q, draft, uniforms), 1e6 random rows per
//     mode (Full/, the heavy tier; the fast tier draws the first 1e5 of them, the ASan stage 2e4:
//     Sample/), V <= 256 (where the kernels' lane-interleaved inverse CDF is index order).
//  3. Planted bugs (Plants.*): each deliberate bug in the reference is caught by the check the
//     table below names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tests/reference/exact_law.h"
#include "tests/support/sanitizer.h"

namespace sk = specdec::kernels;
namespace ref = specdec::reference;

namespace {

using ref::Mode;
using ref::Plant;

// ---- exact laws: the cases ------------------------------------------------------------------

using ref::processor_chains;  // the eight chains (tests/reference/reference_processors.h)

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::greedy: return "greedy";
    case Mode::sampling: return "sampling";
    case Mode::tokens_only: return "tokens_only";
    case Mode::block: return "block";
  }
  return "?";
}

struct LawCase {
  std::string label;
  ref::Setup setup;
  Mode mode = Mode::sampling;
  int gamma = 0;             // chain length (when parents is empty)
  std::vector<int> parents;  // tree (non-empty) or chain
  int length = 0;            // L = max depth + 1, the length of the compared text
};

// The prompt holds tokens, so the repetition penalty acts at the root as well as on the path.
ref::Setup toy_setup(int vocab, uint64_t seed, const ref::Processors& pr) {
  return ref::Setup{{seed * 7 + static_cast<uint64_t>(vocab), vocab},
                    {seed * 13 + 1000 + static_cast<uint64_t>(vocab), vocab},
                    pr,
                    {0, 2 % vocab, 1},
                    Plant::none};
}

// Every (vocab, seed, processors) x (chain mode, gamma 1..3 | tree mode, shape). `small` keeps
// V <= 4 and one seed (the planted-bug runs).
std::vector<LawCase> law_cases(bool chains, bool trees, bool small) {
  const std::vector<std::vector<int>> shapes = {{2}, {3}, {2, 1}, {2, 2}};
  std::vector<LawCase> cases;
  for (int V = 3; V <= (small ? 4 : 5); ++V)
    for (uint64_t seed = 1; seed <= (small ? 1u : 2u); ++seed)
      for (const ref::Processors& pr : processor_chains()) {
        const ref::Setup setup = toy_setup(V, seed, pr);
        const std::string head = "V " + std::to_string(V) + ", seed " + std::to_string(seed) + ", " + pr.name + ", ";
        for (Mode m : {Mode::greedy, Mode::sampling, Mode::tokens_only, Mode::block})
          for (int g = 1; chains && g <= 3; ++g)
            cases.push_back({head + mode_name(m) + " chain, gamma " + std::to_string(g), setup, m, g, {}, g + 1});
        for (Mode m : {Mode::greedy, Mode::sampling, Mode::tokens_only})
          for (size_t s = 0; trees && s < shapes.size(); ++s) {
            if (small && s == 3 && V > 3) continue;
            std::string shape;
            for (int b : shapes[s]) shape += (shape.empty() ? "[" : ",") + std::to_string(b);
            const int length = static_cast<int>(shapes[s].size()) + 1;
            cases.push_back(
                {head + mode_name(m) + " tree " + shape + "]", setup, m, 0, ref::tree_parents(shapes[s]), length});
          }
      }
  return cases;
}

ref::RoundLaw exact_law(const LawCase& c, Plant plant = Plant::none) {
  ref::Setup s = c.setup;
  s.plant = plant;
  return ref::round_law(s, c.length, c.mode == Mode::greedy, [&](ref::Enumerator& e, ref::RowCache& rows) {
    return c.parents.empty() ? ref::chain_round(e, rows, c.mode, c.gamma, plant)
                             : ref::tree_round(e, rows, c.mode, c.parents, plant);
  });
}

// Runs every case; each must be exact (TV <= 1e-12, total probability 1, no reused uniform).
void expect_all_lossless(const std::vector<LawCase>& cases, const char* what) {
  double worst = 0;
  int64_t paths = 0;
  for (const LawCase& c : cases) {
    const ref::RoundLaw r = exact_law(c);
    EXPECT_LE(r.tv, 1e-12) << c.label;
    EXPECT_NEAR(r.mass, 1.0, 1e-12) << c.label;
    EXPECT_EQ(r.uniform_reuses, 0) << c.label;
    worst = std::max(worst, r.tv), paths += r.paths;
  }
  std::printf("  %s: %zu cases, %lld enumerated paths, worst TV %.3g\n", what, cases.size(),
              static_cast<long long>(paths), worst);
}

std::vector<LawCase> only(std::vector<LawCase> cases, bool greedy) {
  std::vector<LawCase> kept;
  for (LawCase& c : cases)
    if ((c.mode == Mode::greedy) == greedy) kept.push_back(std::move(c));
  return kept;
}

// ---- draw by draw: random inputs ----------------------------------------------------------------

// SplitMix64: the inputs are the bulk of the draw-by-draw run time, so a cheap generator.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = state_ += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  static double unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform() { return unit(next()); }
  int below(int n) { return static_cast<int>(uniform() * n); }
  bool chance(double prob) { return uniform() < prob; }

  // The uniforms handed to the verifiers: mostly 53-bit, sometimes the ends 0 and 1 - 2^-53.
  double test_uniform() {
    const int k = below(100);
    return k == 0 ? 0.0 : k == 1 ? 1.0 - 0x1.0p-53 : uniform();
  }

  // A random distribution: one-hot, small integer weights (ties), or continuous, with zeros.
  // dyadic: multiples of 2^-20 that sum to exactly 1 (see TreeBatch); else float
  // quotients, whose sum is 1 only to ~1e-7, like a model's softmax.
  void row(float* out, int V, bool dyadic) {
    const int kind = below(10);
    double total = 0;
    std::vector<double> w(V);
    for (int k = 0; k < V; ++k) {
      const uint64_t bits = next();  // low 10 bits: zero or not; the rest: the weight
      w[k] = kind == 0 || (bits & 1023) < 307 ? 0.0
             : kind < 5                       ? 1.0 + static_cast<double>((bits >> 10) % 4)
                                              : unit(bits);
      total += w[k];
    }
    if (!(total > 0)) w[below(V)] = 1.0, total = 1.0;
    if (dyadic) {
      dyadic_row(w, total, out);
      return;
    }
    for (int k = 0; k < V; ++k) out[k] = static_cast<float>(w[k] / total);
  }

 private:
  uint64_t state_;

  // w / total rounded down to multiples of 2^-20, the remainder added to the largest entry.
  static void dyadic_row(const std::vector<double>& w, double total, float* out) {
    constexpr int64_t kOne = int64_t{1} << 20;
    std::vector<int64_t> n(w.size());
    int64_t sum = 0;
    size_t top = 0;
    for (size_t k = 0; k < w.size(); ++k) {
      n[k] = static_cast<int64_t>(std::floor(w[k] / total * kOne));
      sum += n[k];
      if (w[k] > w[top]) top = k;
    }
    n[top] += kOne - sum;
    for (size_t k = 0; k < w.size(); ++k) out[k] = static_cast<float>(static_cast<double>(n[k]) / kOne);
  }
};

ref::Row to_row(const float* x, int V) { return ref::Row(x, x + V); }

// A draft token for row q: drawn from q, the argmax of the target row p (an accept in
// greedy), or any token (possibly of probability 0 under p or q).
int draft_token(Random& rnd, const float* q, const float* p, int V) {
  const int k = rnd.below(10);
  if (k < 4) return ref::inverse_cdf(to_row(q, V), rnd.uniform());
  if (k < 7) return ref::argmax(to_row(p, V));
  return rnd.below(V);
}

// 1..6 (60 %), 7..32 (35 %), 33..256 (5 %: large rows cost the most to generate).
int random_vocab(Random& rnd) {
  const int k = rnd.below(20);
  return k < 12 ? 1 + rnd.below(6) : k < 19 ? 7 + rnd.below(26) : 33 + rnd.below(224);
}

sk::VerifyMode kernel_mode(Mode m) {
  switch (m) {
    case Mode::greedy: return sk::VerifyMode::greedy;
    case Mode::sampling: return sk::VerifyMode::sampling;
    case Mode::tokens_only: return sk::VerifyMode::tokens_only;
    case Mode::block: return sk::VerifyMode::block;
  }
  return sk::VerifyMode::greedy;
}

std::string join(const std::vector<int>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? " " : "") << v[i];
  return s.str();
}

std::string dump_rows(const char* name, const std::vector<ref::Row>& rows) {
  std::ostringstream s;
  s.precision(9);
  for (size_t i = 0; i < rows.size(); ++i) {
    s << "    " << name << "[" << i << "] =";
    for (double x : rows[i]) s << " " << x;
    s << "\n";
  }
  return s.str();
}

std::string dump_uniforms(const double* u, int n) {
  std::ostringstream s;
  s.precision(17);
  s << "    u =";
  for (int i = 0; i < n; ++i) s << " " << u[i];
  return s.str() + "\n";
}

// ---- draw by draw: chains ----------------------------------------------------------------------

// One verify_cpu call's buffers: B rows of gamma draft tokens over V.
struct ChainBatch {
  int B = 0, gamma = 0, V = 0;
  std::vector<int32_t> draft, n_draft, n_acc, out;
  std::vector<float> q, p;
  std::vector<double> u;

  float* q_row(int b, int i) { return q.data() + (static_cast<int64_t>(b) * gamma + i) * V; }
  float* p_row(int b, int i) { return p.data() + (static_cast<int64_t>(b) * (gamma + 1) + i) * V; }
  const float* q_row(int b, int i) const { return q.data() + (static_cast<int64_t>(b) * gamma + i) * V; }
  const float* p_row(int b, int i) const { return p.data() + (static_cast<int64_t>(b) * (gamma + 1) + i) * V; }
};

// Ragged drafts; p == q rows (20 %), q(x) = 0 < p(x) and zero entries come from the rows;
// dyadic rows in half the batches (see TreeBatch).
ChainBatch random_chain_batch(Random& rnd, int B) {
  ChainBatch c;
  c.B = B, c.gamma = rnd.below(6), c.V = random_vocab(rnd);
  const int G = c.gamma, V = c.V;
  const bool dyadic = rnd.chance(0.5);
  c.draft.assign(B * G, 0), c.n_draft.assign(B, 0), c.q.assign(static_cast<size_t>(B) * G * V, 0.f);
  c.p.assign(static_cast<size_t>(B) * (G + 1) * V, 0.f), c.u.assign(B * (G + 1), 0.0);
  for (int b = 0; b < B; ++b) {
    c.n_draft[b] = rnd.chance(0.5) ? G : rnd.below(G + 1);
    for (int i = 0; i <= G; ++i) {
      float* p = c.p_row(b, i);
      if (i < G) rnd.row(c.q_row(b, i), V, dyadic);
      if (i < G && rnd.chance(0.2))
        std::copy(c.q_row(b, i), c.q_row(b, i) + V, p);
      else
        rnd.row(p, V, dyadic);
      if (i < G) c.draft[b * G + i] = draft_token(rnd, c.q_row(b, i), p, V);
      c.u[b * (G + 1) + i] = rnd.test_uniform();
    }
  }
  return c;
}

void run_verify_cpu(ChainBatch& c, Mode mode) {
  c.n_acc.assign(c.B, -7), c.out.assign(c.B * (c.gamma + 1), -7);
  sk::VerifyArgs a;
  a.batch = c.B, a.gamma = c.gamma, a.vocab = c.V, a.mode = kernel_mode(mode);
  a.draft_tokens = c.draft.data(), a.n_draft = c.n_draft.data(), a.q = c.q.data(), a.p = c.p.data();
  a.uniforms = c.u.data(), a.n_accepted = c.n_acc.data(), a.out_tokens = c.out.data();
  sk::verify_cpu(a);
}

ref::ChainInput chain_input(const ChainBatch& c, int b) {
  ref::ChainInput in;
  in.final_u = c.gamma;
  for (int i = 0; i < c.n_draft[b]; ++i) {
    in.draft.push_back(c.draft[b * c.gamma + i]);
    in.q.push_back(to_row(c.q_row(b, i), c.V));
  }
  for (int i = 0; i <= c.n_draft[b]; ++i) in.p.push_back(to_row(c.p_row(b, i), c.V));
  return in;
}

// The kernel's row as the reference would write it: tokens, then -1 up to width.
std::vector<int> padded(const std::vector<int>& v, int width) {
  std::vector<int> out(v);
  out.resize(width, -1);
  return out;
}

struct DrawStats {
  int64_t cases = 0, mismatches = 0;
  std::string first;  // the first mismatch, in full
  // Cases holding a token x with q(x) = 0 < p(x), a q row equal to its p row, two siblings
  // with the same token: the inputs the comparison must cover.
  int64_t q_zero_tokens = 0, equal_rows = 0, duplicate_siblings = 0;
};

// x is judged by (p, q): counts q(x) = 0 < p(x) and p == q once per case.
void count_features(const ref::Row& p, const ref::Row& q, int x, bool& q_zero, bool& equal) {
  q_zero |= q[x] == 0.0 && p[x] > 0.0;
  equal |= p == q;
}

void count_chain_features(const ref::ChainInput& in, DrawStats& st) {
  bool q_zero = false, equal = false;
  for (int i = 0; i < in.n(); ++i) count_features(in.p[i], in.q[i], in.draft[i], q_zero, equal);
  st.q_zero_tokens += q_zero, st.equal_rows += equal;
}

void count_tree_features(const ref::TreeInput& t, DrawStats& st) {
  bool q_zero = false, equal = false, duplicate = false;
  for (int c = 0; c < t.n(); ++c) {
    count_features(t.p[t.parents[c] + 1], t.q[c], t.tokens[c], q_zero, equal);
    for (int s = 0; s < c; ++s) duplicate |= t.parents[s] == t.parents[c] && t.tokens[s] == t.tokens[c];
  }
  st.q_zero_tokens += q_zero, st.equal_rows += equal, st.duplicate_siblings += duplicate;
}

void compare_chain_row(const ChainBatch& c, int b, Mode mode, Plant plant, DrawStats& st) {
  const ref::ChainInput in = chain_input(c, b);
  const ref::UniformSource src(c.u.data() + b * (c.gamma + 1), c.gamma + 1);
  const ref::Outcome want = ref::verify_chain(mode, in, src, plant);
  const std::vector<int> got(c.out.begin() + b * (c.gamma + 1), c.out.begin() + (b + 1) * (c.gamma + 1));
  ++st.cases;
  count_chain_features(in, st);
  if (c.n_acc[b] == want.accepted && got == padded(want.tokens, c.gamma + 1)) return;
  if (st.mismatches++ > 0) return;
  std::ostringstream s;
  s << "  verify_cpu " << mode_name(mode) << ": V " << c.V << ", gamma " << c.gamma << ", n_draft " << c.n_draft[b]
    << ", draft [" << join(in.draft) << "]\n"
    << dump_rows("p", in.p) << dump_rows("q", in.q) << dump_uniforms(c.u.data() + b * (c.gamma + 1), c.gamma + 1)
    << "    kernel:    n_accepted " << c.n_acc[b] << ", out [" << join(got) << "]\n"
    << "    reference: n_accepted " << want.accepted << ", out [" << join(padded(want.tokens, c.gamma + 1)) << "]\n";
  st.first = s.str();
}

DrawStats chain_draws(Mode mode, int64_t n_cases, uint64_t seed, Plant plant = Plant::none) {
  Random rnd(seed);
  DrawStats st;
  while (st.cases < n_cases) {
    ChainBatch c = random_chain_batch(rnd, 512);
    run_verify_cpu(c, mode);
    for (int b = 0; b < c.B; ++b) compare_chain_row(c, b, mode, plant, st);
  }
  return st;
}

// ---- draw by draw: trees -----------------------------------------------------------------------

// One verify_tree_cpu call's buffers: B trees of up to N nodes over V.
//
// Rows are dyadic (multiples of 2^-20 summing to exactly 1) in half the batches, float quotients
// in the others (summing to 1 only within ~1e-7, like a softmax). Why: tree sampling
// renormalises its running residual. When a residual is empty in exact arithmetic but not in
// floats (a p == q row, or a fallback q_c, after rejecting a token of probability 0 under q_c),
// both implementations are left with rounding noise (mass ~1e-8) and draw from it tokens that
// depend on how each rounds; the kernel also rescales a fallback q_c by its double sum z where
// the reference takes q_c as given, as both take p. Such residuals need a draft token with
// q_c(x) = 0, which i.i.d. drafts never give, so tree sampling on float rows drafts only tokens
// with q_c(x) > 0 (drafted_only); the dyadic batches, where those residuals are exactly empty,
// keep every kind of token.
struct TreeBatch {
  int B = 0, N = 0, V = 0;
  bool dyadic = false, drafted_only = false;
  std::vector<int32_t> tokens, parents, n_nodes, n_acc, path, out;
  std::vector<float> q, p;
  std::vector<double> u, scratch;

  float* q_row(int b, int c) { return q.data() + (static_cast<int64_t>(b) * N + c) * V; }
  float* p_row(int b, int r) { return p.data() + (static_cast<int64_t>(b) * (N + 1) + r) * V; }
};

// A random parent for node c: a sibling of c - 1 (40 %), c - 1 itself (30 %) or any earlier.
int random_parent(Random& rnd, int parent_of_previous, int c) {
  if (c == 0) return -1;
  const int k = rnd.below(10);
  return k < 4 ? parent_of_previous : k < 7 ? c - 1 : rnd.below(c + 1) - 1;
}

// A node's token: a duplicate of an earlier sibling, or draft_token's choice (from its q row,
// the argmax of the parent's p row, any token); redrawn from q_c when drafted_only and
// q_c(x) = 0.
int random_node_token(Random& rnd, TreeBatch& t, int b, int c, int parent) {
  const float* q = t.q_row(b, c);
  int x = -1;
  if (rnd.chance(0.2))
    for (int s = c - 1; s >= 0 && x < 0; --s)
      if (t.parents[b * t.N + s] == parent) x = t.tokens[b * t.N + s];
  if (x < 0) x = draft_token(rnd, q, t.p_row(b, parent + 1), t.V);
  if (t.drafted_only && !(q[x] > 0.f)) x = ref::inverse_cdf(to_row(q, t.V), rnd.uniform());
  return x;
}

// A fresh random row, or (20 %) a copy of `same`: p == q for a node and its children.
void row_or_copy(Random& rnd, const TreeBatch& t, const std::vector<float>& same, float* out) {
  if (rnd.chance(0.2))
    std::copy(same.begin(), same.end(), out);
  else
    rnd.row(out, t.V, t.dyadic);
}

// Siblings usually share their parent's q row (as in a real tree).
void random_tree(Random& rnd, TreeBatch& t, int b) {
  const int N = t.N, V = t.V;
  t.n_nodes[b] = rnd.chance(0.7) ? N : rnd.below(N + 1);
  std::vector<std::vector<float>> child_q(N + 1, std::vector<float>(V));  // by parent + 1
  rnd.row(child_q[0].data(), V, t.dyadic);
  row_or_copy(rnd, t, child_q[0], t.p_row(b, 0));
  for (int c = 0; c < N; ++c) {
    const int parent = random_parent(rnd, c > 0 ? t.parents[b * N + c - 1] : -1, c);
    t.parents[b * N + c] = parent;
    if (rnd.chance(0.8))
      std::copy(child_q[parent + 1].begin(), child_q[parent + 1].end(), t.q_row(b, c));
    else
      rnd.row(t.q_row(b, c), V, t.dyadic);
    t.tokens[b * N + c] = random_node_token(rnd, t, b, c, parent);
    rnd.row(child_q[c + 1].data(), V, t.dyadic);
    row_or_copy(rnd, t, child_q[c + 1], t.p_row(b, c + 1));
  }
  for (int i = 0; i <= N; ++i) t.u[b * (N + 1) + i] = rnd.test_uniform();
}

TreeBatch random_tree_batch(Random& rnd, int B, Mode mode) {
  TreeBatch t;
  t.B = B, t.N = rnd.below(13), t.V = random_vocab(rnd);
  t.dyadic = rnd.chance(0.5), t.drafted_only = mode == Mode::sampling && !t.dyadic;
  const int N = t.N, V = t.V;
  t.tokens.assign(B * N, 0), t.parents.assign(B * N, -1), t.n_nodes.assign(B, 0);
  t.q.assign(static_cast<size_t>(B) * N * V, 0.f), t.p.assign(static_cast<size_t>(B) * (N + 1) * V, 0.f);
  t.u.assign(B * (N + 1), 0.0), t.scratch.assign(static_cast<size_t>(B) * V, 0.0);
  for (int b = 0; b < B; ++b) random_tree(rnd, t, b);
  return t;
}

void run_verify_tree_cpu(TreeBatch& t, Mode mode) {
  t.n_acc.assign(t.B, -7), t.path.assign(t.B * t.N, -7), t.out.assign(t.B * (t.N + 1), -7);
  sk::TreeVerifyArgs a;
  a.batch = t.B, a.max_nodes = t.N, a.vocab = t.V, a.mode = kernel_mode(mode);
  a.tokens = t.tokens.data(), a.parents = t.parents.data(), a.n_nodes = t.n_nodes.data();
  a.q = t.q.data(), a.p = t.p.data(), a.uniforms = t.u.data(), a.scratch = t.scratch.data();
  a.n_accepted = t.n_acc.data(), a.path = t.path.data(), a.out_tokens = t.out.data();
  sk::verify_tree_cpu(a);
}

ref::TreeInput tree_input(TreeBatch& t, int b) {
  ref::TreeInput in;
  in.final_u = t.N;
  for (int c = 0; c < t.n_nodes[b]; ++c) {
    in.tokens.push_back(t.tokens[b * t.N + c]);
    in.parents.push_back(t.parents[b * t.N + c]);
    in.q.push_back(to_row(t.q_row(b, c), t.V));
  }
  for (int r = 0; r <= t.n_nodes[b]; ++r) in.p.push_back(to_row(t.p_row(b, r), t.V));
  return in;
}

void compare_tree_row(TreeBatch& t, int b, Mode mode, Plant plant, DrawStats& st) {
  const ref::TreeInput in = tree_input(t, b);
  const ref::UniformSource src(t.u.data() + b * (t.N + 1), t.N + 1);
  const ref::Outcome want = ref::verify_tree(mode, in, src, plant);
  const std::vector<int> got_out(t.out.begin() + b * (t.N + 1), t.out.begin() + (b + 1) * (t.N + 1));
  const std::vector<int> got_path(t.path.begin() + b * t.N, t.path.begin() + (b + 1) * t.N);
  ++st.cases;
  count_tree_features(in, st);
  if (t.n_acc[b] == want.accepted && got_out == padded(want.tokens, t.N + 1) && got_path == padded(want.path, t.N))
    return;
  if (st.mismatches++ > 0) return;
  std::ostringstream s;
  s << "  verify_tree_cpu " << mode_name(mode) << ": V " << t.V << ", N " << t.N << ", n_nodes " << t.n_nodes[b]
    << ", tokens [" << join(in.tokens) << "], parents [" << join(in.parents) << "]\n"
    << dump_rows("p", in.p) << dump_rows("q", in.q) << dump_uniforms(t.u.data() + b * (t.N + 1), t.N + 1)
    << "    kernel:    n_accepted " << t.n_acc[b] << ", path [" << join(got_path) << "], out [" << join(got_out)
    << "]\n"
    << "    reference: n_accepted " << want.accepted << ", path [" << join(padded(want.path, t.N)) << "], out ["
    << join(padded(want.tokens, t.N + 1)) << "]\n";
  st.first = s.str();
}

DrawStats tree_draws(Mode mode, int64_t n_cases, uint64_t seed, Plant plant = Plant::none) {
  Random rnd(seed);
  DrawStats st;
  while (st.cases < n_cases) {
    TreeBatch t = random_tree_batch(rnd, 512, mode);
    run_verify_tree_cpu(t, mode);
    for (int b = 0; b < t.B; ++b) compare_tree_row(t, b, mode, plant, st);
  }
  return st;
}


void expect_identical(const DrawStats& st, const char* what, bool tree) {
  std::printf(
      "  %s: %lld cases (q(x) = 0 < p(x): %lld, p == q rows: %lld, duplicate siblings: %lld), "
      "%lld mismatches\n",
      what, static_cast<long long>(st.cases), static_cast<long long>(st.q_zero_tokens),
      static_cast<long long>(st.equal_rows), static_cast<long long>(st.duplicate_siblings),
      static_cast<long long>(st.mismatches));
  EXPECT_GT(st.q_zero_tokens, st.cases / 100) << what;
  EXPECT_GT(st.equal_rows, st.cases / 100) << what;
  if (tree) {
    EXPECT_GT(st.duplicate_siblings, st.cases / 100) << what;
  }
  EXPECT_EQ(st.mismatches, 0) << "KERNEL DIFFERS FROM THE REFERENCE (" << what
                              << "): a kernel bug unless the reference is wrong; first mismatch:\n"
                              << st.first;
}

}  // namespace

// ---- 1. exact laws ---------------------------------------------------------------------------------

TEST(ExactLaw, ChainSamplingTokensOnlyAndBlockAreLossless) {
  expect_all_lossless(only(law_cases(true, false, false), false), "chain sampling, tokens_only, block");
}

// The sanitizer build skips two tests (25 of this file's 32 s there, 2026-12-06): this one and
// Plants.*. Their subject is the reference itself (tests/reference: its exact laws, its planted
// bugs); the library code they reach, the verify kernels, runs under the sanitizers in
// DrawByDraw's Sample/ beside the same reference.
constexpr const char* kReferenceOnly = "its subject is the test's own reference: the main build runs it";

TEST(ExactLaw, TreeSamplingAndTokensOnlyAreLossless) {
  if (specdec::test_support::kSanitized) GTEST_SKIP() << kReferenceOnly;
  expect_all_lossless(only(law_cases(false, true, false), false), "tree sampling, tokens_only");
}

TEST(ExactLaw, GreedyEmitsTheTargetsGreedyTextWithProbabilityOne) {
  // The law is compared with the point mass on the target's greedy text: TV = the probability
  // of any other output.
  expect_all_lossless(only(law_cases(true, true, false), true), "greedy chains and trees");
}

TEST(ExactLaw, BlockAcceptsAtLeastAsManyAsTokenWise) {
  int strict = 0, n = 0;
  for (const LawCase& c : law_cases(true, false, false)) {
    if (c.mode != Mode::block) continue;
    LawCase tok = c;
    tok.mode = Mode::sampling;
    const double blk = exact_law(c).mean_accepted, tw = exact_law(tok).mean_accepted;
    EXPECT_GE(blk, tw - 1e-12) << c.label;
    strict += blk > tw + 1e-9, ++n;
  }
  std::printf("  E[accepted]: block > token-wise in %d of %d chain cases, equal in the rest\n", strict, n);
  EXPECT_GT(strict, 0);
}

TEST(ExactLaw, BlockBeatsTokenWiseOnSunEtAlsExample) {
  // Context-free p = (1/3, 2/3), q = (2/3, 1/3), gamma = 2: E[accepted] is 10/9 token-wise
  // and 11/9 with block verification (Sun et al. 2025).
  auto expected_accepted = [](Mode mode) {
    ref::Enumerator e;
    double mean = 0;
    e.for_each_path(
        [&](ref::Enumerator& en) {
          ref::ChainInput in;
          in.final_u = 2;
          in.p.assign(3, ref::Row{1.0 / 3, 2.0 / 3});
          in.q.assign(2, ref::Row{2.0 / 3, 1.0 / 3});
          for (int i = 0; i < 2; ++i) in.draft.push_back(en.choose(in.q[i]));
          ref::EnumerationSource src(en);
          return ref::verify_chain(mode, in, src).accepted;
        },
        [&](int accepted, double prob) { mean += prob * accepted; });
    return mean;
  };
  EXPECT_NEAR(expected_accepted(Mode::sampling), 10.0 / 9, 1e-12);
  EXPECT_NEAR(expected_accepted(Mode::block), 11.0 / 9, 1e-12);
}

TEST(ExactLaw, ReferenceProcessorsFollowHuggingFace) {
  // Hand-computed: the penalty divides positive and multiplies negative logits, once per id.
  ref::Row logits{1.0, -1.0, 2.0, 0.0};
  ref::apply_repetition_penalty(logits, {0, 1, 1}, 1.5);
  EXPECT_EQ(logits, (ref::Row{1.0 / 1.5, -1.5, 2.0, 0.0}));
  // Top-k keeps ties with the k-th largest logit.
  ref::Row tied{1.0, 2.0, 2.0, 3.0};
  ref::apply_top_k(tied, 2);
  EXPECT_EQ(tied, (ref::Row{ref::kMinusInf, 2.0, 2.0, 3.0}));
  // probs (0.1, 0.2, 0.3, 0.4): top-p 0.8 drops the ascending prefix with cumulative mass
  // <= 0.2 (token 0 only); min-p 0.3 drops probabilities below 0.3 * 0.4 (token 0 only).
  const ref::Row probs{0.1, 0.2, 0.3, 0.4}, kept{0.0, 2.0 / 9, 3.0 / 9, 4.0 / 9};
  ref::Row lp(4);
  for (int k = 0; k < 4; ++k) lp[k] = std::log(probs[k]);
  ref::Processors top_p, min_p;
  top_p.top_p = 0.8, min_p.min_p = 0.3;
  for (const ref::Processors& pr : {top_p, min_p}) {
    const ref::Row out = ref::process(lp, {}, pr);
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(out[k], kept[k], 1e-15) << k;
  }
  // Temperature 0.5 squares the odds: (1, 2) -> (1/5, 4/5).
  ref::Processors temp;
  temp.temperature = 0.5;
  const ref::Row t = ref::process({0.0, std::log(2.0)}, {}, temp);
  EXPECT_NEAR(t[0], 0.2, 1e-15);
  EXPECT_NEAR(t[1], 0.8, 1e-15);
}

TEST(ExactLaw, ToyModelsHaveZeroCornersAndTies) {
  // The properties the exact cases rely on, in the processed target rows they use.
  int zeros = 0, ties = 0, rows = 0;
  for (int V = 3; V <= 5; ++V)
    for (const ref::Processors& pr : processor_chains()) {
      const ref::Setup s = toy_setup(V, 1, pr);
      for (int a = 0; a < V; ++a)
        for (int b = 0; b < V; ++b) {
          const ref::Row p = s.true_p({a, b});
          const double top = *std::max_element(p.begin(), p.end());
          zeros += std::count(p.begin(), p.end(), 0.0) > 0;
          ties += std::count(p.begin(), p.end(), top) > 1;
          ++rows;
        }
    }
  std::printf("  processed target rows: %d, with a zero entry %d, with a tied argmax %d\n", rows, zeros, ties);
  EXPECT_GT(zeros, rows / 10);
  EXPECT_GT(ties, rows / 20);
}

// ---- 2. draw by draw --------------------------------------------------------------------------------

// The parameter is the number of cases per mode: Sample/ (1e5: the fast tier; 2e4 in the ASan
// stage, tests/support/sanitizer.h) draws the first of Full/'s cases (1e6: the heavy tier), from
// the same seeds.
// ctest-heavy: Full/DrawByDraw.*
class DrawByDraw : public ::testing::TestWithParam<int64_t> {};
TEST_P(DrawByDraw, ChainGreedy) { expect_identical(chain_draws(Mode::greedy, GetParam(), 101), "chain greedy", false); }
TEST_P(DrawByDraw, ChainSampling) {
  expect_identical(chain_draws(Mode::sampling, GetParam(), 102), "chain sampling", false);
}
TEST_P(DrawByDraw, ChainTokensOnly) {
  expect_identical(chain_draws(Mode::tokens_only, GetParam(), 103), "chain tokens_only", false);
}
TEST_P(DrawByDraw, ChainBlock) { expect_identical(chain_draws(Mode::block, GetParam(), 104), "chain block", false); }
TEST_P(DrawByDraw, TreeGreedy) { expect_identical(tree_draws(Mode::greedy, GetParam(), 105), "tree greedy", true); }
TEST_P(DrawByDraw, TreeSampling) { expect_identical(tree_draws(Mode::sampling, GetParam(), 106), "tree sampling", true); }
TEST_P(DrawByDraw, TreeTokensOnly) {
  expect_identical(tree_draws(Mode::tokens_only, GetParam(), 107), "tree tokens_only", true);
}
INSTANTIATE_TEST_SUITE_P(Sample, DrawByDraw, ::testing::Values(specdec::test_support::sanitizer_scaled(100000, 5)));
INSTANTIATE_TEST_SUITE_P(Full, DrawByDraw, ::testing::Values(int64_t{1000000}));

// ---- 3. planted bugs ----------------------------------------------------------------------------------

namespace {

// Which check catches each plant (asserted both ways: a check marked false must stay silent,
// so the table says exactly what each check sees).
struct PlantCase {
  Plant plant;
  const char* name;
  bool by_law;    // exact enumeration: TV > 1e-3 (greedy: the greedy text fails) in some case
  bool by_reuse;  // exact enumeration: a uniform consumed twice on some path
  bool by_draws;  // the kernels differ draw by draw
};

const PlantCase kPlants[] = {
    // The rows are the verifier's inputs, so the kernels see the same wrong rows: only the
    // law against the true target catches it.
    {Plant::penalty_without_path, "repetition penalty without the path", true, false, false},
    {Plant::pq_swapped_at_depth_1, "p and q swapped at depth 1", true, false, true},
    {Plant::sibling_residual_stale, "sibling residual not updated", true, false, true},
    {Plant::block_h_shifted, "block h_i one position early", true, false, true},
    {Plant::bonus_row_shifted, "bonus row one position early", true, false, true},
    {Plant::residual_unnormalised, "tree residual not renormalised", true, false, true},
    {Plant::greedy_ties_to_highest, "greedy ties to the highest id", true, false, true},
    // Enumeration treats every call as a fresh uniform, so the law looks right: the
    // at-most-once check is what catches a reused uniform.
    {Plant::residual_reuses_uniform, "residual drawn with the rejection's uniform", false, true, true},
};

struct PlantVerdict {
  double worst_tv = 0;
  std::string worst_case;  // the exact case of the largest TV
  int64_t reuses = 0, mismatches = 0;
  std::string differing;  // the draw-by-draw modes that differ
};

void note_draws(PlantVerdict& v, const DrawStats& st, const std::string& what) {
  v.mismatches += st.mismatches;
  if (st.mismatches > 0) v.differing += (v.differing.empty() ? "" : ", ") + what;
}

PlantVerdict run_plant(Plant plant) {
  PlantVerdict v;
  for (const LawCase& c : law_cases(true, true, true)) {
    const ref::RoundLaw r = exact_law(c, plant);
    if (r.tv > v.worst_tv) v.worst_tv = r.tv, v.worst_case = c.label;
    v.reuses += r.uniform_reuses;
  }
  constexpr int64_t kPlantDraws = 20000;
  for (Mode m : {Mode::greedy, Mode::sampling, Mode::tokens_only, Mode::block})
    note_draws(v, chain_draws(m, kPlantDraws, 201, plant), std::string("chain ") + mode_name(m));
  for (Mode m : {Mode::greedy, Mode::sampling, Mode::tokens_only})
    note_draws(v, tree_draws(m, kPlantDraws, 202, plant), std::string("tree ") + mode_name(m));
  return v;
}

}  // namespace

TEST(Plants, EachIsCaughtByTheCheckItsTableNames) {
  if (specdec::test_support::kSanitized) GTEST_SKIP() << kReferenceOnly;
  for (const PlantCase& pc : kPlants) {
    const PlantVerdict v = run_plant(pc.plant);
    std::printf("  %s: worst TV %.3g (%s), reused uniforms %lld, draw mismatches %lld (%s)\n", pc.name, v.worst_tv,
                v.worst_case.c_str(), static_cast<long long>(v.reuses), static_cast<long long>(v.mismatches),
                v.differing.c_str());
    if (pc.by_law)
      EXPECT_GT(v.worst_tv, 1e-3) << pc.name;
    else
      EXPECT_LE(v.worst_tv, 1e-12) << pc.name;
    EXPECT_EQ(v.reuses > 0, pc.by_reuse) << pc.name;
    EXPECT_EQ(v.mismatches > 0, pc.by_draws) << pc.name;
  }
}
