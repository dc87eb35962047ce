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
};

// ---- sampling weights ------------------------------------------------------------------

// Clamp at zero without a branch: (w + |w|) / 2 is exact (w or 0) and keeps the CPU sweep
// vectorised; a compare-and-select stops GCC from vectorising it (8x slower measured).
// NaN stays NaN, so a NaN row ends up with no usable mass and is reported, never sampled.
SD_HD inline double positive_part(double w) { return (w + ::fabs(w)) * 0.5; }

// Weight of token i: the residual max(0, p - q) when q is given, else max(0, p). The
// difference of two floats is formed in double, so it is exact for all practical values.
SD_HD inline double sample_weight(const float* p, const float* q, int64_t i) {
  return positive_part(q ? static_cast<double>(p[i]) - static_cast<double>(q[i]) : static_cast<double>(p[i]));
}

// Mass of one lane, summed in element order. Used by one CUDA thread per lane.
SD_HD inline double lane_mass(const float* p,  // [V]
                              const float* q,  // [V] or nullptr
                              int64_t n_vocab, int lane) {
  double mass = 0.0;
  for (int64_t i = lane; i < n_vocab; i += kLanes) mass += sample_weight(p, q, i);
  return mass;
}

// All lane masses in one sequential sweep (CPU). mass[l] receives exactly the additions
// lane_mass(l) performs, in the same order, so the results are bit-identical.
SD_HD inline void lane_masses_sweep(const float* p,  // [V]
                                    const float* q,  // [V] or nullptr
                                    int64_t n_vocab,
                                    double* mass) {  // [kLanes] out
  for (int l = 0; l < kLanes; ++l) mass[l] = 0.0;
  int64_t base = 0;
  // Two loops instead of a branch per element keep the inner loop vectorisable.
  if (q) {
    for (; base + kLanes <= n_vocab; base += kLanes)
      for (int l = 0; l < kLanes; ++l)
        mass[l] += positive_part(static_cast<double>(p[base + l]) - static_cast<double>(q[base + l]));
  } else {
    for (; base + kLanes <= n_vocab; base += kLanes)
      for (int l = 0; l < kLanes; ++l) mass[l] += positive_part(static_cast<double>(p[base + l]));
  }
  for (int l = 0; base + l < n_vocab; ++l) mass[l] += sample_weight(p, q, base + l);
}

struct LanePick {
  int lane;          // -1 when the total mass is zero
  double remaining;  // target mass left to walk inside the lane
};

// Inverse CDF over lanes: the lane whose cumulative mass first exceeds u * total.
// Lanes of zero mass are never picked; u == 1 (a float uniform may round up) falls back to
// the last lane with mass.
SD_HD inline LanePick pick_lane(const double* mass,  // [kLanes]
                                float u) {
  double total = 0.0;
  for (int l = 0; l < kLanes; ++l) total += mass[l];
  if (!(total > 0.0)) return {-1, 0.0};
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int last = -1;
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
SD_HD inline int64_t scan_lane(const float* p,  // [V]
                               const float* q,  // [V] or nullptr
                               int64_t n_vocab, int lane, double remaining) {
  double cum = 0.0;
  int64_t last = -1;
  for (int64_t i = lane; i < n_vocab; i += kLanes) {
    const double w = sample_weight(p, q, i);
    if (w > 0.0) {
      last = i;
      if (remaining < cum + w) return i;
    }
    cum += w;
  }
  return last;
}

// ---- argmax ------------------------------------------------------------------------------

// Greedy ties go to the lowest token id (as torch.argmax and greedy decoding do); NaN ranks
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

// ---- one sequence ------------------------------------------------------------------------

// The inputs of one sequence b, cut out of VerifyArgs.
struct RowView {
  int64_t gamma = 0, n_vocab = 0;
  VerifyMode mode = VerifyMode::greedy;
  const int32_t* draft = nullptr;  // [gamma]
  int32_t n_draft = 0;
  const float* q = nullptr;        // [gamma, V] (sampling mode) else nullptr
  const float* p = nullptr;        // [gamma+1, V]
  const float* u = nullptr;        // [gamma+1] (not read in greedy mode)
  bool planted_residual_bug = false;  // testing only (VerifyArgs::planted_residual_bug)
};

SD_HD inline RowView row_view(const VerifyArgs& a, int64_t b) {
  RowView r;
  r.gamma = a.gamma;
  r.n_vocab = a.vocab;
  r.mode = a.mode;
  r.draft = a.draft_tokens ? a.draft_tokens + b * a.gamma : nullptr;
  r.n_draft = a.n_draft ? a.n_draft[b] : static_cast<int32_t>(a.gamma);
  r.q = (a.mode == VerifyMode::sampling && a.q) ? a.q + b * a.gamma * a.vocab : nullptr;
  r.p = a.p + b * (a.gamma + 1) * a.vocab;
  r.u = a.uniforms ? a.uniforms + b * (a.gamma + 1) : nullptr;
  r.planted_residual_bug = a.planted_residual_bug;
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
      if (!(r.u[i] >= 0.0f && r.u[i] <= 1.0f)) return row_error(kBadUniform, static_cast<int32_t>(i));
  return RowResult{};
}

// Verifies one sequence. Ops supplies argmax(row, V) and sample(p, q, V, u) -> token or -1
// (zero mass); every caller thread gets the same values back, so on the GPU the whole block
// runs this control flow in lockstep while Ops does the block-parallel row work.
SD_HD_TEMPLATE_PRAGMA
template <class Ops>
SD_HD RowResult verify_row(const RowView& r, Ops& ops) {
  RowResult res = check_row(r);
  if (res.status != kRowOk) return res;
  const int64_t V = r.n_vocab;
  for (int32_t i = 0; i < r.n_draft; ++i) {
    const int32_t x = r.draft[i];
    const float* p_i = r.p + i * V;  // [V]
    int64_t next = -1;
    if (r.mode == VerifyMode::greedy) {
      next = ops.argmax(p_i, V);
      if (next == x) continue;
      if (r.planted_residual_bug) next = x;  // testing only: keep the rejected token
    } else if (r.mode == VerifyMode::sampling) {
      const float* q_i = r.q + i * V;  // [V]
      // Accept iff u < p/q, written as u*q < p: exact in double (a product of two floats),
      // accepts q(x) = 0 < p(x), and never accepts p(x) = 0.
      if (static_cast<double>(r.u[i]) * q_i[x] < static_cast<double>(p_i[x])) continue;
      next = ops.sample(p_i, r.planted_residual_bug ? nullptr : q_i, V, r.u[r.gamma]);
      // Residual mass 0 happens only when p <= q everywhere, i.e. p == q up to rounding:
      // then the residual is p itself.
      if (next < 0) next = ops.sample(p_i, nullptr, V, r.u[r.gamma]);
    } else {  // tokens_only: y_i ~ p_i, accept while y_i == x_i
      next = ops.sample(p_i, nullptr, V, r.u[i]);
      if (next == x) continue;
      if (r.planted_residual_bug) next = x;  // testing only: keep the rejected token
    }
    if (next < 0) return row_error(kNoMass, i);
    res.n_accepted = i;
    res.next_token = static_cast<int32_t>(next);
    return res;
  }
  const float* p_bonus = r.p + static_cast<int64_t>(r.n_draft) * V;  // [V]
  const int64_t bonus = r.mode == VerifyMode::greedy ? ops.argmax(p_bonus, V)
                                                     : ops.sample(p_bonus, nullptr, V, r.u[r.gamma]);
  if (bonus < 0) return row_error(kNoMass, r.n_draft);
  res.n_accepted = r.n_draft;
  res.next_token = static_cast<int32_t>(bonus);
  return res;
}

// out: [gamma+1] -> accepted draft tokens, the next token, then -1. On error all -1.
SD_HD inline void write_row_output(const RowView& r, const RowResult& res, int32_t* out) {
  for (int64_t i = 0; i <= r.gamma; ++i) {
    int32_t t = -1;
    if (res.status == kRowOk) {
      if (i < res.n_accepted) t = r.draft[i];
      else if (i == res.n_accepted) t = res.next_token;
    }
    out[i] = t;
  }
}

}  // namespace specdec::kernels::math
