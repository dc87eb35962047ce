#pragma once
// Per-row verification logic shared by verify_cpu and the CUDA kernel (DESIGN principle 8).
//
// Notation (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
// Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"):
// p = target probabilities, q = draft probabilities, x_i = draft token at position i.
// A drafted x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the first
// rejection the next token is drawn from norm(max(0, p_i - q_i)); after a fully accepted
// draft a bonus token is drawn from p_{n_draft}. This leaves the output distributed as p.
//
// Sampling layout. A row of V weights is split into kLanes interleaved lanes: lane l owns
// the elements l, l + kLanes, l + 2 kLanes, ... A CUDA thread sums one lane (coalesced
// reads); the CPU sums all lanes in one sequential sweep with the same order of additions
// per lane. Both therefore get bit-identical lane masses (double), pick the same lane by
// inverse CDF over lanes and then the same element inside it: identical tokens on
// identical uniforms. The residual max(0, p - q) is never materialised: it is recomputed
// from p and q in the sweep and in the one lane that is scanned (one pass + V / kLanes).
//
// Scaled residuals. Block verification (Sun et al. 2025) samples norm(max(0, w p - q)) for a
// weight w in [0, 1], and tree verification (kernels/tree_math.h) keeps an unnormalised
// running residual r of mass z and subtracts q from r / z. Both are "max(0, s p - q)" with a
// scale s on p, which every weight function below takes (default 1). The row p may be a
// float row (model output) or a double row (a residual materialised in caller scratch).
// s = 1 reproduces the unscaled weights bit for bit (1.0 * x == x exactly).
#include <cmath>
#include <cstdint>
#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#endif

#include "kernels/kernels.h"
#include "kernels/sd_hd.h"

namespace specdec::kernels::math {

constexpr int kLanes = 256;  // also the CUDA block size of the verification kernel

// Row status codes; verify_cpu/verify_cuda turn a negative one into a specdec::Error.
enum RowStatus : int32_t {
  kRowOk = 0,
  kBadNDraft = -1,      // n_draft[b] outside [0, gamma]
  kBadToken = -2,       // draft_tokens[b][i] outside [0, V)
  kBadUniform = -3,     // uniforms[b][i] not in [0, 1]
  kNoMass = -4,         // p[b][i] has no positive entry or holds NaN (cannot sample)
  kBadParent = -5,      // tree only: parents[b][i] outside [-1, i)
};

// ---- sampling weights ------------------------------------------------------------------

// Clamp at zero without a branch: (w + |w|) / 2 is exact (w or 0) and keeps the CPU sweep
// vectorised; a compare-and-select stops GCC from vectorising it (8x slower measured).
// NaN stays NaN, so a NaN row ends up with no usable mass and is reported, never sampled.
SD_HD inline double positive_part(double w) { return (w + ::fabs(w)) * 0.5; }

// s * x with no FMA contraction into the subtraction that follows, so the GPU rounds like
// the CPU (x86-64 builds without -mfma never contract). s = 1 is exact either way.
SD_HD inline double scaled(double s, double x) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(s, x);
#else
  return s * x;
#endif
}

// Weight of token i: the residual max(0, s p - q) when q is given, else max(0, p) (a plain
// sample of p; the scale does not change a normalised distribution and is not applied). The
// difference is formed in double: exact for s = 1 and float inputs.
template <class T>
SD_HD inline double sample_weight(const T* p,      // [V] float or double
                                  const float* q,  // [V] or nullptr
                                  int64_t i, double p_scale = 1.0) {
  return positive_part(q ? scaled(p_scale, static_cast<double>(p[i])) - static_cast<double>(q[i])
                         : static_cast<double>(p[i]));
}

// Mass of one lane, summed in element order. Used by one CUDA thread per lane.
template <class T>
SD_HD inline double lane_mass(const T* p,      // [V]
                              const float* q,  // [V] or nullptr
                              int64_t n_vocab, int lane, double p_scale = 1.0) {
  double mass = 0.0;
  for (int64_t i = lane; i < n_vocab; i += kLanes) mass += sample_weight(p, q, i, p_scale);
  return mass;
}

// All lane masses in one sequential sweep (CPU). mass[l] receives exactly the additions
// lane_mass(l) performs, in the same order, so the results are bit-identical.
template <class T>
SD_HD inline void lane_masses_sweep(const T* p,      // [V]
                                    const float* q,  // [V] or nullptr
                                    int64_t n_vocab,
                                    double* mass,    // [kLanes] out
                                    double p_scale = 1.0) {
  for (int l = 0; l < kLanes; ++l) mass[l] = 0.0;
  int64_t base = 0;
  // Separate loops instead of a branch per element keep the inner loop vectorisable; the
  // unscaled residual (token-wise verification, the hot path) skips the multiply.
  if (q && p_scale == 1.0) {
    for (; base + kLanes <= n_vocab; base += kLanes)
      for (int l = 0; l < kLanes; ++l)
        mass[l] += positive_part(static_cast<double>(p[base + l]) - static_cast<double>(q[base + l]));
  } else if (q) {
    for (; base + kLanes <= n_vocab; base += kLanes)
      for (int l = 0; l < kLanes; ++l)
        mass[l] += positive_part(scaled(p_scale, static_cast<double>(p[base + l])) - static_cast<double>(q[base + l]));
  } else {
    for (; base + kLanes <= n_vocab; base += kLanes)
      for (int l = 0; l < kLanes; ++l) mass[l] += positive_part(static_cast<double>(p[base + l]));
  }
  for (int l = 0; base + l < n_vocab; ++l) mass[l] += sample_weight(p, q, base + l, p_scale);
}

// Total mass, always summed over lanes in lane order (CPU and GPU alike).
SD_HD inline double lane_total(const double* mass) {  // [kLanes]
  double total = 0.0;
  SD_NO_UNROLL
  for (int l = 0; l < kLanes; ++l) total += mass[l];
  return total;
}

// Writes the weights of one lane to dst and returns the lane's mass (one CUDA thread).
// dst may alias p (an in-place update of a materialised residual): each element is read
// before it is written, by the same thread.
template <class T>
SD_HD inline double lane_materialize(const T* p,      // [V]
                                     const float* q,  // [V] or nullptr
                                     int64_t n_vocab, int lane, double p_scale,
                                     double* dst) {   // [V] out
  double mass = 0.0;
  for (int64_t i = lane; i < n_vocab; i += kLanes) {
    const double w = sample_weight(p, q, i, p_scale);
    dst[i] = w;
    mass += w;
  }
  return mass;
}

// CPU form of lane_materialize for all lanes: the same additions per lane, in order.
template <class T>
SD_HD inline void materialize_sweep(const T* p,      // [V]
                                    const float* q,  // [V] or nullptr
                                    int64_t n_vocab, double p_scale,
                                    double* dst,     // [V] out (may alias p)
                                    double* mass) {  // [kLanes] out
  for (int l = 0; l < kLanes; ++l) mass[l] = 0.0;
  int64_t base = 0;
  // Full blocks of kLanes without a bound check per element (vectorisable), then the tail.
  for (; base + kLanes <= n_vocab; base += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double w = sample_weight(p, q, base + l, p_scale);
      dst[base + l] = w;
      mass[l] += w;
    }
  for (int l = 0; base + l < n_vocab; ++l) {
    const double w = sample_weight(p, q, base + l, p_scale);
    dst[base + l] = w;
    mass[l] += w;
  }
}

struct LanePick {
  int lane;          // -1 when the total mass is zero
  double remaining;  // target mass left to walk inside the lane
};

// Inverse CDF over lanes: the lane whose cumulative mass first exceeds u * total.
// Lanes of zero mass are never picked; u == 1 (tolerated from callers) falls back to
// the last lane with mass.
SD_HD inline LanePick pick_lane(const double* mass,  // [kLanes]
                                double u) {
  const double total = lane_total(mass);
  if (!(total > 0.0)) return {-1, 0.0};
  const double target = u * total;
  double cum = 0.0;
  int last = -1;
  SD_NO_UNROLL
  for (int l = 0; l < kLanes; ++l) {
    if (mass[l] > 0.0) {
      last = l;
      if (target < cum + mass[l]) return {l, target - cum};
    }
    cum += mass[l];
  }
  return {last, mass[last]};
}

// Inverse CDF inside one lane; rounding that walks past the end takes the lane's last
// element of positive weight (it exists: pick_lane only returns lanes with mass).
template <class T>
SD_HD inline int64_t scan_lane(const T* p,      // [V]
                               const float* q,  // [V] or nullptr
                               int64_t n_vocab, int lane, double remaining, double p_scale = 1.0) {
  double cum = 0.0;
  int64_t last = -1;
  for (int64_t i = lane; i < n_vocab; i += kLanes) {
    const double w = sample_weight(p, q, i, p_scale);
    if (w > 0.0) {
      last = i;
      if (remaining < cum + w) return i;
    }
    cum += w;
  }
  return last;
}

// ---- argmax ------------------------------------------------------------------------------

// THE argmax of the project: argmax_row below is used by the kernels (ops.argmax), by
// src/sampling (greedy_token, argmax_rows, probabilities' greedy one-hot) and through
// sampling::argmax_rows by the drafters. Greedy ties go to the lowest token id (as torch.argmax and greedy decoding do); NaN ranks
// as -inf. Both rules make the result independent of the reduction order.
struct ArgMax {
  float value;
  int64_t index;  // -1: empty
};

SD_HD inline float argmax_key(float v) { return v == v ? v : -__builtin_huge_valf(); }

SD_HD inline ArgMax argmax_merge(ArgMax a, ArgMax b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

// Argmax of one lane (one CUDA thread).
SD_HD inline ArgMax lane_argmax(const float* row,  // [V]
                                int64_t n_vocab, int lane) {
  ArgMax best{0.0f, -1};
  for (int64_t i = lane; i < n_vocab; i += kLanes) best = argmax_merge(best, ArgMax{argmax_key(row[i]), i});
  return best;
}

// Argmax of a row in one thread (CPU): the maximum of each block of kArgmaxBlock values,
// then a scan of the first block holding the overall maximum for its first occurrence.
// The block maximum keeps 16 independent partial maxima so the compiler can use SIMD max
// without reassociating (NaN never wins a `>` comparison, so it ranks as -inf).
SD_HD inline float block_max(const float* x, int64_t n) {
  constexpr int kPart = 16;
  float part[kPart];
  int64_t i = 0;
#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
  // _mm_max_ps(v, m) returns m when v is NaN or v <= m: exactly `v > m ? v : m` below.
  __m128 m0 = _mm_set1_ps(-__builtin_huge_valf()), m1 = m0, m2 = m0, m3 = m0;
  for (; i + kPart <= n; i += kPart) {
    m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), m3);
  }
  _mm_storeu_ps(part, m0), _mm_storeu_ps(part + 4, m1), _mm_storeu_ps(part + 8, m2), _mm_storeu_ps(part + 12, m3);
#else
  for (int k = 0; k < kPart; ++k) part[k] = -__builtin_huge_valf();
  for (; i + kPart <= n; i += kPart)
    for (int k = 0; k < kPart; ++k) part[k] = x[i + k] > part[k] ? x[i + k] : part[k];
#endif
  for (; i < n; ++i) part[0] = x[i] > part[0] ? x[i] : part[0];
  float m = part[0];
  for (int k = 1; k < kPart; ++k) m = part[k] > m ? part[k] : m;
  return m;
}

SD_HD inline int64_t argmax_row(const float* row,  // [V]
                                int64_t n_vocab) {
  constexpr int64_t kArgmaxBlock = 2048;
  float best = -__builtin_huge_valf();
  int64_t best_block = 0;
  for (int64_t b0 = 0; b0 < n_vocab; b0 += kArgmaxBlock) {
    const float m = block_max(row + b0, b0 + kArgmaxBlock < n_vocab ? kArgmaxBlock : n_vocab - b0);
    if (m > best) best = m, best_block = b0;
  }
  for (int64_t i = best_block; i < n_vocab; ++i)
    if (argmax_key(row[i]) == best) return i;
  return 0;  // unreachable for n_vocab > 0
}

// ---- inverse CDF in index order -----------------------------------------------------------

// The host samplers' inverse CDF (src/sampling's sample_from, hence the sampling strategy and
// the drafters): the first id whose running sum of positive probabilities exceeds u, summed
// in double in index order; rounding slack (u >= the total) goes to the last positive entry.
// Returns -1 when no entry is positive (NaN entries are skipped: `p > 0` is false for NaN).
// The verification kernels' ops.sample draws by inverse CDF over kLanes lanes instead (see
// pick_lane/scan_lane above), so that one CUDA thread per lane and the CPU pick the same
// token; the two orders give different tokens for the same u, and seeded outputs depend on
// which one a caller uses, so both stay, here side by side.
SD_HD inline int64_t inverse_cdf_row(const float* probs,  // [V]
                                     int64_t n_vocab, double u) {
  double cum = 0.0;
  int64_t last_positive = -1;
  for (int64_t v = 0; v < n_vocab; ++v) {
    if (!(probs[v] > 0.0f)) continue;
    cum += probs[v];
    last_positive = v;
    if (u < cum) return v;
  }
  return last_positive;
}

// ---- one sequence ------------------------------------------------------------------------

// The inputs of one sequence b, cut out of VerifyArgs.
struct RowView {
  int64_t gamma = 0, n_vocab = 0;
  VerifyMode mode = VerifyMode::greedy;
  const int32_t* draft = nullptr;  // [gamma]
  int32_t n_draft = 0;
  const float* q = nullptr;        // [gamma, V] (sampling and block modes) else nullptr
  const float* p = nullptr;        // [gamma+1, V]
  const double* u = nullptr;       // [gamma+1] (not read in greedy mode)
};

SD_HD inline RowView row_view(const VerifyArgs& a, int64_t b) {
  RowView r;
  r.gamma = a.gamma;
  r.n_vocab = a.vocab;
  r.mode = a.mode;
  r.draft = a.draft_tokens ? a.draft_tokens + b * a.gamma : nullptr;
  r.n_draft = a.n_draft ? a.n_draft[b] : static_cast<int32_t>(a.gamma);
  const bool uses_q = a.mode == VerifyMode::sampling || a.mode == VerifyMode::block;
  r.q = (uses_q && a.q) ? a.q + b * a.gamma * a.vocab : nullptr;
  r.p = a.p + b * (a.gamma + 1) * a.vocab;
  r.u = a.uniforms ? a.uniforms + b * (a.gamma + 1) : nullptr;
  return r;
}

struct RowResult {
  int32_t n_accepted = 0;
  int32_t next_token = -1;
  int32_t status = kRowOk;   // RowStatus
  int32_t bad_index = -1;    // position of the offending entry when status < 0
};

SD_HD inline RowResult row_error(int32_t status, int32_t index) {
  RowResult r;
  r.status = status;
  r.bad_index = index;
  return r;
}

// Input checks that need the row's data (done where the data lives: host or device).
SD_HD inline RowResult check_row(const RowView& r) {
  if (r.n_draft < 0 || r.n_draft > r.gamma) return row_error(kBadNDraft, r.n_draft);
  for (int32_t i = 0; i < r.n_draft; ++i)
    if (r.draft[i] < 0 || r.draft[i] >= r.n_vocab) return row_error(kBadToken, i);
  if (r.mode != VerifyMode::greedy)
    for (int64_t i = 0; i <= r.gamma; ++i)
      if (!(r.u[i] >= 0.0 && r.u[i] <= 1.0)) return row_error(kBadUniform, static_cast<int32_t>(i));
  return RowResult{};
}

// ---- block verification (Sun et al. 2025, "Block Verification Accelerates Speculative
// Decoding", ICLR 2025) ------------------------------------------------------------------
//
// With w_0 = 1 and, for the draft x_1..x_n (p_i, q_i = the rows of position i, i.e. rows
// i-1 in storage):
//   w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i))
//   h_i = S_i / (S_i + 1 - w_i),  S_i = sum_x max(0, w_i p_{i+1}(x) - q_{i+1}(x))   (i < n)
//   h_n = w_n
// the accepted length tau is the largest i with u_i <= h_i (0 if none), and the next token
// is a bonus sample of p_{n+1} when tau = n, else a sample of norm(max(0, w_tau p_{tau+1} -
// q_{tau+1})) (w_0 = 1: the token-wise residual). The output is distributed as the target
// and E[tau] is never below token-wise verification's (both proved by Sun et al.; their
// motivating example, p = (1/3, 2/3), q = (2/3, 1/3) context-free with gamma = 2, gives 11/9
// vs 10/9: tests/unit/test_kernels_block_stats.cpp).
//
// Walking i = n down to 1 and stopping at the first accepted i gives the same tau with
// fewer row sweeps (each h_i, i < n, costs one sweep of row i+1): a full acceptance costs
// none. w_i is recomputed from the draft (O(i) scalars) instead of being stored, so the row
// needs no scratch. Edge cases (all measure zero under a continuous uniform):
//   * p_i(x_i) = 0 gives w_i = 0 and every later w is 0: h = 0, no sweep;
//   * q_i(x_i) = 0 < p_i(x_i) (a token the draft could not have drawn) gives w_i = 1;
//   * S_i + 1 - w_i = 0 means w_i = 1 and p_{i+1} <= q_{i+1} everywhere, i.e. p_{i+1} = q_{i+1}:
//     then w_{i+1} = 1 and h_{i+1} = 1 (or is 0/0 again, recursively up to h_n = 1), so in
//     exact arithmetic the walk stops above i and h_i is never used. h_i = 1 (the w -> 1
//     limit) is taken; should rounding reach it, tau = i and the empty residual falls back to
//     p_{i+1}, which equals q_{i+1} up to rounding;
//   * acceptance is u_i < h_i or h_i = 1, so u = 1 (tolerated from callers) accepts a
//     certain position and u = 0 never accepts h = 0 (a prefix whose residual is empty).

// One step of the weight recursion; w = 0 (an earlier p(x) = 0) stays 0.
SD_HD inline double block_weight_step(double w, float p_x, float q_x) {
  if (!(w > 0.0) || !(p_x > 0.0f)) return 0.0;  // NaN p ends the block too
  const double wp = w * static_cast<double>(p_x);
  return wp >= static_cast<double>(q_x) ? 1.0 : wp / static_cast<double>(q_x);
}

// w_i for the first i draft tokens (i = 0 gives 1).
SD_HD inline double block_weight(const RowView& r, int32_t i) {
  double w = 1.0;
  for (int32_t j = 0; j < i; ++j) {
    const int32_t x = r.draft[j];
    w = block_weight_step(w, r.p[j * r.n_vocab + x], r.q[j * r.n_vocab + x]);
  }
  return w;
}

// h_i given w_i: the probability of stopping at prefix i once all longer prefixes failed.
SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD double block_stop_prob(const RowView& r, Ops& ops, int32_t i, double w) {
  if (i == r.n_draft) return w;
  if (!(w > 0.0)) return 0.0;  // S_i = 0 and 1 - w_i = 1: skip the sweep
  const int64_t V = r.n_vocab;
  const double s = ops.mass(r.p + i * V, r.q + i * V, V, w);  // rows of position i+1
  const double denom = s + (1.0 - w);
  return denom > 0.0 ? s / denom : 1.0;  // 0/0: never reached, see above
}

SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD RowResult verify_block_row(const RowView& r, Ops& ops) {
  const int64_t V = r.n_vocab;
  int32_t tau = 0;
  double w_tau = 1.0;
  for (int32_t i = r.n_draft; i >= 1; --i) {
    const double w = block_weight(r, i);
    const double h = block_stop_prob(r, ops, i, w);
    if (r.u[i - 1] < h || h >= 1.0) {
      tau = i, w_tau = w;
      break;
    }
  }
  const float* p_next = r.p + static_cast<int64_t>(tau) * V;  // [V] row after the prefix
  const double u = r.u[r.gamma];
  int64_t next = -1;
  if (tau == r.n_draft) {
    next = ops.sample(p_next, nullptr, V, u, 1.0);
  } else {
    const float* q_next = r.q + static_cast<int64_t>(tau) * V;  // [V]
    next = ops.sample(p_next, q_next, V, u, w_tau);
    // An empty residual means w_tau p <= q everywhere (w_tau = 1, p == q up to rounding):
    // then the residual is p itself, as in token-wise verification.
    if (next < 0) next = ops.sample(p_next, nullptr, V, u, 1.0);
  }
  if (next < 0) return row_error(kNoMass, tau);
  RowResult res;
  res.n_accepted = tau;
  res.next_token = static_cast<int32_t>(next);
  return res;
}

// ---- one sequence, all modes ------------------------------------------------------------

// Verifies one sequence. Ops supplies
//   argmax(row, V) -> token,
//   sample(p, q, V, u, s) -> token drawn from norm(max(0, s p - q)) (q given) or norm(p),
//                           -1 when that weight has no mass,
//   mass(p, q, V, s) -> the total of those weights (block mode),
// with p a float or double row; every caller thread gets the same values back, so on the GPU
// the whole block runs this control flow in lockstep while Ops does the block-parallel row
// work.
SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD RowResult verify_row(const RowView& r, Ops& ops) {
  RowResult res = check_row(r);
  if (res.status != kRowOk) return res;
  if (r.mode == VerifyMode::block) return verify_block_row(r, ops);
  const int64_t V = r.n_vocab;
  for (int32_t i = 0; i < r.n_draft; ++i) {
    const int32_t x = r.draft[i];
    const float* p_i = r.p + i * V;  // [V]
    int64_t next = -1;
    if (r.mode == VerifyMode::greedy) {
      next = ops.argmax(p_i, V);
      if (next == x) continue;
    } else if (r.mode == VerifyMode::sampling) {
      const float* q_i = r.q + i * V;  // [V]
      // Accept iff u < p/q, written as u*q < p in double: accepts q(x) = 0 < p(x) and never
      // accepts p(x) = 0. u has 53 random bits (a float uniform would give tokens with
      // p < 2^-24 probability 0 or 2^-24 instead of p); the product rounds only for u within
      // ~1e-16 (relative) of p/q.
      if (r.u[i] * q_i[x] < static_cast<double>(p_i[x])) continue;
      next = ops.sample(p_i, q_i, V, r.u[r.gamma], 1.0);
      // Residual mass 0 happens only when p <= q everywhere, i.e. p == q up to rounding:
      // then the residual is p itself.
      if (next < 0) next = ops.sample(p_i, nullptr, V, r.u[r.gamma], 1.0);
    } else {  // tokens_only: y_i ~ p_i, accept while y_i == x_i
      next = ops.sample(p_i, nullptr, V, r.u[i], 1.0);
      if (next == x) continue;
    }
    if (next < 0) return row_error(kNoMass, i);
    res.n_accepted = i;
    res.next_token = static_cast<int32_t>(next);
    return res;
  }
  const float* p_bonus = r.p + static_cast<int64_t>(r.n_draft) * V;  // [V]
  const int64_t bonus = r.mode == VerifyMode::greedy ? ops.argmax(p_bonus, V)
                                                     : ops.sample(p_bonus, nullptr, V, r.u[r.gamma], 1.0);
  if (bonus < 0) return row_error(kNoMass, r.n_draft);
  res.n_accepted = r.n_draft;
  res.next_token = static_cast<int32_t>(bonus);
  return res;
}

// out: [gamma+1] -> accepted draft tokens, the next token, then -1. On error the offending
// entry's index in out[0] (check_verify_status names it), then -1: CPU and CUDA alike.
SD_HD inline void write_row_output(const RowView& r, const RowResult& res, int32_t* out) {
  for (int64_t i = 0; i <= r.gamma; ++i) {
    int32_t t = -1;
    if (res.status == kRowOk) {
      if (i < res.n_accepted) t = r.draft[i];
      else if (i == res.n_accepted) t = res.next_token;
    } else if (i == 0) {
      t = res.bad_index;
    }
    out[i] = t;
  }
}

}  // namespace specdec::kernels::math
