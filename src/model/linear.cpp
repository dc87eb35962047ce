// Linear: y = x W^T + b with the kernel picked by row count. See linear.h.
#include "model/linear.h"

#include "core/error.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>

#ifdef SPECDEC_WITH_DNNL
#include <dnnl.h>
#endif

namespace specdec::model {

const char* linear_path_name(LinearPath path) {
  switch (path) {
    case LinearPath::kAuto: return "auto";
    case LinearPath::kMv: return "mv";
    case LinearPath::kDnnl: return "dnnl";
    case LinearPath::kGemm: return "gemm";
    case LinearPath::kBf16: return "bf16";
    case LinearPath::kSkinny: return "skinny";
  }
  return "?";
}

Linear::Linear(at::Tensor weight, at::Tensor bias, at::ScalarType dtype) {
  SD_CHECK(weight.defined() && weight.dim() == 2, "Linear: weight must be 2-D [out, in], got ",
           weight.defined() ? weight.sizes() : at::IntArrayRef{});
  SD_CHECK(dtype == at::kFloat || dtype == at::kBFloat16,
           "Linear: weight dtype must be float32 or bfloat16, got ", dtype);
  SD_CHECK(weight.size(0) > 0 && weight.size(1) > 0, "Linear: empty weight ", weight.sizes());
  if (bias.defined()) {
    SD_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "Linear: bias shape ",
             bias.sizes(), " does not match weight ", weight.sizes(), " (expected [",
             weight.size(0), "])");
    b_ = bias.to(at::kFloat).contiguous();
  }
  w_ = weight.to(dtype).contiguous();
}

int64_t Linear::in_features() const { return w_.defined() ? w_.size(1) : 0; }
int64_t Linear::out_features() const { return w_.defined() ? w_.size(0) : 0; }

int64_t Linear::weight_bytes() const {
  if (!w_.defined()) return 0;
  int64_t n = w_.numel() * static_cast<int64_t>(w_.element_size());
  if (b_.defined()) n += b_.numel() * static_cast<int64_t>(b_.element_size());
  return n;
}

namespace {
std::atomic<LinearPolicy> g_policy{LinearPolicy::kSkinny};
}  // namespace

void set_linear_policy(LinearPolicy policy) { g_policy = policy; }
LinearPolicy linear_policy() { return g_policy; }

// The dispatch table, in one place. Measured with build/bench/bench_model_linear and, for the
// whole model, build/bench/bench_model_decode on this machine (2-core AMD EPYC, AVX-512 BF16,
// OpenBLAS-openmp, 2 threads); numbers in results/engine.md. In the model every weight comes
// from DRAM (538 MB do not fit in cache), so the LM head shape (576 -> 49152, 113 MB) is the
// representative one: there the skinny kernel beats at::mv at 1 row and dnnl_sgemm at 2-8 rows
// (e.g. 8 rows: ~10 ms vs ~17 ms) because it reads W once at near memory bandwidth. Beyond 8
// rows W is re-read per group of 8: library GEMMs win (fp32: OpenBLAS gemm; bf16: oneDNN).
// Without AVX-512F: mv for 1 row (OpenBLAS gemm with M=1 is ~2x slower), dnnl for 2-8.
LinearPath Linear::choose_path(int64_t n_rows) const {
  const bool skinny = linear_policy() == LinearPolicy::kSkinny && linear_has_skinny();
  if (w_.scalar_type() == at::kBFloat16)
    return skinny && n_rows <= 8 ? LinearPath::kSkinny : LinearPath::kBf16;
  if (skinny && n_rows <= 8) return LinearPath::kSkinny;
  if (n_rows == 1) return LinearPath::kMv;
  if (n_rows <= 8) return LinearPath::kDnnl;
  return LinearPath::kGemm;
}

at::Tensor Linear::operator()(const at::Tensor& x) const {
  return forward_path(x, LinearPath::kAuto);
}


// ---- the skinny kernel ----------------------------------------------------------------------
// Decode and verification multiply a handful of rows by a large W: the cost is reading W from
// memory once. This kernel walks each row of W once, 16 weights at a time, and multiplies them
// into all (up to 8) rows of x, which stay in L1/L2. Weights are fp32 or bf16; bf16 is widened
// exactly (a bf16 is the top half of an fp32), so only the weights' own rounding differs from
// fp32. Threads split the output features into contiguous ranges (each streams its part of W).

bool linear_has_skinny() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

namespace {

// GCC 12 flags _mm512_undefined inside its own intrinsic headers (a known false positive);
// the templates below are instantiated at the end of the file, so this stays on to the end.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load_w(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load_w(const at::BFloat16* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);  // needs avx512bw+vl; see the target below
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// How many tiles ahead to prefetch W. Measured on the LM head (bench_model_linear, 2/1/5 and
// 2/8/5, ms fp32 N=1/5/8): none 5.9/9.4/11.2, 1 tile 5.0/6.9/7.6, 3 tiles 6.4/8.4/6.7.
constexpr int kPrefetchTiles = 1;

// y[n, o] = b[o] + sum_k x[n, k] w[o, k] for R consecutive output features o = o0 .. o0+R-1
// and the N rows of x. x: [N, in] fp32; w: [out, in] (WT = float or at::BFloat16); y: [N, out].
// R rows of W share each load of x, and R*N independent accumulators hide the FMA latency
// (one accumulator would serialise 4-cycle FMAs at 1 row).

template <int N, int R, class WT>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void skinny_tile(
    const float* x, const WT* w, const float* b, float* y, int64_t in, int64_t out, int64_t o0) {
  const int64_t n_full = in / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (in - n_full)) - 1);
  __m512 acc[R][N];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t k = 0; k < n_full; k += 16) {
    __m512 wv[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      wv[r] = load_w(w + (o0 + r) * in + k, __mmask16(0xffff));
      // The same columns of a later tile's rows: keeps DRAM busy while this tile computes
      // (hardware prefetchers lose track of R interleaved row streams). Past the end of W it
      // is harmless: prefetches do not fault.
      if (kPrefetchTiles > 0)
        _mm_prefetch(reinterpret_cast<const char*>(w + (o0 + kPrefetchTiles * R + r) * in + k),
                     _MM_HINT_T0);
    }
    #pragma GCC unroll 16
    for (int n = 0; n < N; ++n) {
      const __m512 xv = _mm512_loadu_ps(x + n * in + k);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][n] = _mm512_fmadd_ps(wv[r], xv, acc[r][n]);
    }
  }
  if (tail) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load_w(w + (o0 + r) * in + n_full, tail);
      #pragma GCC unroll 16
      for (int n = 0; n < N; ++n)
        acc[r][n] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(tail, x + n * in + n_full),
                                    acc[r][n]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const float bias = b ? b[o0 + r] : 0.0f;
    #pragma GCC unroll 16
    for (int n = 0; n < N; ++n) y[n * out + o0 + r] = _mm512_reduce_add_ps(acc[r][n]) + bias;
  }
}

// Output features [o_begin, o_end) for N rows of x, R features per tile (fewer registers
// are left per tile as N grows: R*N accumulators must fit in 32 zmm registers).
template <int N, class WT>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void skinny_block(const float* x, const WT* w, const float* b, float* y, int64_t in,
                  int64_t out, int64_t o_begin, int64_t o_end) {
  constexpr int R = N <= 2 ? 4 : (N <= 5 ? 3 : 2);
  int64_t o = o_begin;
  for (; o + R <= o_end; o += R) skinny_tile<N, R>(x, w, b, y, in, out, o);
  for (; o < o_end; ++o) skinny_tile<N, 1>(x, w, b, y, in, out, o);
}

template <class WT>
void skinny_rows(int n, const float* x, const WT* w, const float* b, float* y, int64_t in,
                 int64_t out, int64_t o0, int64_t o1) {
  switch (n) {
    case 1: return skinny_block<1>(x, w, b, y, in, out, o0, o1);
    case 2: return skinny_block<2>(x, w, b, y, in, out, o0, o1);
    case 3: return skinny_block<3>(x, w, b, y, in, out, o0, o1);
    case 4: return skinny_block<4>(x, w, b, y, in, out, o0, o1);
    case 5: return skinny_block<5>(x, w, b, y, in, out, o0, o1);
    case 6: return skinny_block<6>(x, w, b, y, in, out, o0, o1);
    case 7: return skinny_block<7>(x, w, b, y, in, out, o0, o1);
    default: return skinny_block<8>(x, w, b, y, in, out, o0, o1);
  }
}

// x: [N, in] fp32 contiguous; w: [out, in] fp32 or bf16; b: [out] or undefined -> [N, out].
// Rows of x go in groups of 8 (W is re-read per group: use it for N <= 8).
at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const int64_t n_rows = x.size(0), in = x.size(1), out = w.size(0);
  at::Tensor y = at::empty({n_rows, out}, x.options());
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  // ~64 KiB of weights per task: enough to amortise a thread hand-off, small enough that
  // both threads get work on 576-wide layers.
  const int64_t grain = std::max<int64_t>(1, 65536 / (in * w.element_size()));
  for (int64_t r = 0; r < n_rows; r += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, n_rows - r));
    const float* xp = x.data_ptr<float>() + r * in;
    float* yp = y.data_ptr<float>() + r * out;
    at::parallel_for(0, out, grain, [&](int64_t o0, int64_t o1) {
      if (w.scalar_type() == at::kBFloat16)
        skinny_rows(n, xp, w.data_ptr<at::BFloat16>(), bp, yp, in, out, o0, o1);
      else
        skinny_rows(n, xp, w.data_ptr<float>(), bp, yp, in, out, o0, o1);
    });
  }
  return y;
}

// x: [N, in] -> y: [N, out] via oneDNN's row-major sgemm, streaming W once for all rows.
at::Tensor dnnl_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
#ifdef SPECDEC_WITH_DNNL
  at::Tensor y;
  float beta = 0.0f;
  if (b.defined()) {  // start from the bias in every row and accumulate onto it
    // A fresh buffer: for n == 1 expand().contiguous() would alias b and sgemm would
    // accumulate into the bias itself.
    y = at::empty({n, m}, x.options());
    y.copy_(b.unsqueeze(0).expand({n, m}));
    beta = 1.0f;
  } else {
    y = at::empty({n, m}, x.options());
  }
  auto st = dnnl_sgemm('N', 'T', n, m, k, 1.0f, x.data_ptr<float>(), k, w.data_ptr<float>(), k,
                       beta, y.data_ptr<float>(), m);
  SD_CHECK(st == dnnl_success, "Linear: dnnl_sgemm failed with status ", static_cast<int>(st),
           " for [", n, ", ", k, "] x [", m, ", ", k, "]^T");
  return y;
#else
  return b.defined() ? at::addmm(b, x, w.t()) : at::mm(x, w.t());
#endif
}

}  // namespace

at::Tensor Linear::forward_path(const at::Tensor& x_in, LinearPath path) const {
  SD_CHECK(w_.defined(), "Linear: called on an empty (default-constructed) layer");
  SD_CHECK(x_in.defined() && x_in.dim() == 2, "Linear: input must be 2-D [N, in], got ",
           x_in.defined() ? x_in.sizes() : at::IntArrayRef{});
  SD_CHECK(x_in.size(1) == in_features(), "Linear: input has ", x_in.size(1),
           " features, weight expects ", in_features(), " (weight ", w_.sizes(), ")");
  SD_CHECK(x_in.scalar_type() == at::kFloat, "Linear: input must be float32, got ",
           x_in.scalar_type());
  const at::Tensor x = x_in.contiguous();
  const int64_t n = x.size(0);
  if (n == 0) return at::empty({0, out_features()}, x.options());
  if (path == LinearPath::kAuto) path = choose_path(n);

  const bool bf16 = w_.scalar_type() == at::kBFloat16;
  SD_CHECK(path == LinearPath::kSkinny || bf16 == (path == LinearPath::kBf16), "Linear: path ",
           linear_path_name(path), " does not match weight dtype ", w_.scalar_type());
  switch (path) {
    case LinearPath::kMv: {
      SD_CHECK(n == 1, "Linear: path mv needs exactly 1 row, got ", n);
      at::Tensor v = x.reshape({in_features()});
      at::Tensor y = b_.defined() ? at::addmv(b_, w_, v) : at::mv(w_, v);
      return y.reshape({1, out_features()});
    }
    case LinearPath::kDnnl:
      return dnnl_linear(x, w_, b_);
    case LinearPath::kGemm:
      return b_.defined() ? at::addmm(b_, x, w_.t()) : at::mm(x, w_.t());
    case LinearPath::kBf16: {
      at::Tensor y = at::linear(x.to(at::kBFloat16), w_).to(at::kFloat);
      if (b_.defined()) y.add_(b_);
      return y;
    }
    case LinearPath::kSkinny:
      SD_CHECK(linear_has_skinny(), "Linear: path skinny needs AVX-512F, which this CPU lacks");
      return skinny_linear(x, w_, b_);
    case LinearPath::kAuto: break;
  }
  fail("Linear: unknown path");
}

}  // namespace specdec::model
