// Linear: y = x W^T + b with the kernel picked by row count. See linear.h.
#include "model/linear.h"

#include "core/error.h"
#include "core/parallel.h"

#include <immintrin.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

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

namespace {

constexpr int64_t kPanel = 32;  // output features per panel of the packed layout
at::Tensor pack_panels(const at::Tensor& w);                      // defined with the kernel
at::Tensor unpack_panels(const at::Tensor& panels, int64_t out);  // below

// A copy of t in memory backed by 2 MiB pages where the kernel allows it (transparent huge
// pages in "madvise" mode, the usual default). Streaming a weight matrix through 4 KiB pages
// costs a TLB miss per page and restarts the hardware prefetchers at every page boundary
// (measured: a few per cent, results/engine.md).
at::Tensor on_huge_pages(const at::Tensor& t) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t bytes = t.nbytes();
  if (bytes < kHuge) return t;
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, size) != 0) return t;
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP this is ordinary memory
  at::Tensor out = at::from_blob(p, t.sizes(), [](void* q) { std::free(q); }, t.options());
  out.copy_(t);
  return out;
}

}  // namespace

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
  out_ = weight.size(0);
  in_ = weight.size(1);
  dtype_ = dtype;
  at::Tensor w = weight.to(dtype).contiguous();
  if (linear_policy() == LinearPolicy::kSkinny && linear_has_skinny())
    panels_ = on_huge_pages(pack_panels(w));
  else
    w_ = on_huge_pages(w);
}

int64_t Linear::in_features() const { return in_; }
int64_t Linear::out_features() const { return out_; }

at::Tensor Linear::weight() const {
  return panels_.defined() ? unpack_panels(panels_, out_) : w_;
}

at::Tensor Linear::rows(const at::Tensor& ids_in) const {
  const at::Tensor ids = ids_in.to(at::kLong).contiguous();
  const int64_t n = ids.numel();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    SD_CHECK(id[i] >= 0 && id[i] < out_, "Linear::rows: row ", id[i], " out of range [0, ", out_,
             ")");
  if (!panels_.defined()) return w_.index_select(0, ids).to(at::kFloat);
  // Row o of W is column o % 32 of panel o / 32: in values 32 apart.
  at::Tensor out = at::empty({n, in_}, at::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor col = panels_.select(0, id[i] / kPanel).select(1, id[i] % kPanel);  // [in]
    out.select(0, i).copy_(col);
  }
  return out;
}

int64_t Linear::weight_bytes() const {
  const at::Tensor& w = panels_.defined() ? panels_ : w_;
  if (!w.defined()) return 0;
  int64_t n = w.numel() * static_cast<int64_t>(w.element_size());
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
// from DRAM (538 MB do not fit in cache). The panel kernel reads each weight once per call
// as one sequential stream whatever the row count, and holds SmolLM2's decode (1 row) and
// verification (5, 8 rows) at memory bandwidth, where at::mv and dnnl_sgemm reach about half
// of it. Packed layers therefore always take it; prefill goes through it too, 8 rows at a
// time against a panel that stays in L2. Library layout (no AVX-512F, or LinearPolicy::
// kLibrary): mv for 1 row (OpenBLAS gemm with M=1 is ~2x slower), dnnl for 2-8, gemm after;
// bf16 weights through oneDNN's at::linear.
LinearPath Linear::choose_path(int64_t n_rows) const {
  if (panels_.defined()) return LinearPath::kSkinny;
  if (dtype_ == at::kBFloat16) return LinearPath::kBf16;
  if (n_rows == 1) return LinearPath::kMv;
  if (n_rows <= 8) return LinearPath::kDnnl;
  return LinearPath::kGemm;
}

at::Tensor Linear::operator()(const at::Tensor& x) const {
  return forward_path(x, LinearPath::kAuto);
}

// ---- the panel kernel ------------------------------------------------------------------------
// Decode and verification multiply a handful of rows by a large W: the cost is reading W from
// memory once. W is stored in panels of kPanel = 32 output features, each panel as [in, 32]
// (k-major), so a panel is one contiguous stream for the hardware prefetcher. For every k the
// kernel loads the 32 weights of that k, broadcasts x[n, k] of each of the (up to 8) rows and
// accumulates 32 outputs per row in two zmm registers: no horizontal sums, and each output
// is one fused multiply-add chain over k = 0 .. in-1 whatever the number of rows, so a row's
// result is bit-identical in decode (1 row), verification (2-9 rows) and prefill.
// Weights are fp32 or bf16; bf16 is widened exactly (a bf16 is the top half of an fp32).
// Threads split the panels; a task runs all row groups of its panels while they sit in L2.

bool linear_has_skinny() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

namespace {

// GCC 12 flags _mm512_undefined inside its own intrinsic headers (a known false positive);
// the templates below are instantiated at the end of the file, so this stays on to the end.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// w: [out, in] -> [ceil(out / 32), in, 32], zero-padded past `out`.
at::Tensor pack_panels(const at::Tensor& w) {
  const int64_t out = w.size(0), in = w.size(1), n_panels = (out + kPanel - 1) / kPanel;
  at::Tensor padded = at::zeros({n_panels * kPanel, in}, w.options());
  padded.narrow(0, 0, out).copy_(w);
  return padded.view({n_panels, kPanel, in}).transpose(1, 2).contiguous();
}

at::Tensor unpack_panels(const at::Tensor& panels, int64_t out) {
  const int64_t in = panels.size(1);
  return panels.transpose(1, 2).reshape({-1, in}).narrow(0, 0, out).contiguous();
}

__attribute__((target("avx512f"))) inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f"))) inline __m512 load16(const at::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// y[n, o] = b[o] + sum_k x[n, k] w[o, k] for the 32 outputs of panel p and N rows of x.
// x: [N, in] (row stride in); y: [N, out] (row stride out).
template <int N, class WT>
__attribute__((target("avx512f"))) void panel_rows(const float* x, const WT* panels,
                                                   const float* b, float* y, int64_t in,
                                                   int64_t out, int64_t p) {
  const WT* w = panels + p * in * kPanel;
  __m512 acc[N][2];
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < in; ++k) {
    const __m512 w0 = load16(w + k * kPanel), w1 = load16(w + k * kPanel + 16);
    for (int n = 0; n < N; ++n) {
      const __m512 xb = _mm512_set1_ps(x[n * in + k]);
      acc[n][0] = _mm512_fmadd_ps(w0, xb, acc[n][0]);
      acc[n][1] = _mm512_fmadd_ps(w1, xb, acc[n][1]);
    }
  }
  const int64_t o0 = p * kPanel, valid = std::min(kPanel, out - o0);
  const auto mask = [](int64_t k) {
    return static_cast<__mmask16>(k >= 16 ? 0xffff : k <= 0 ? 0 : (1u << k) - 1);
  };
  const __mmask16 m0 = mask(valid), m1 = mask(valid - 16);
  const __m512 b0 = b ? _mm512_maskz_loadu_ps(m0, b + o0) : _mm512_setzero_ps();
  const __m512 b1 = b ? _mm512_maskz_loadu_ps(m1, b + o0 + 16) : _mm512_setzero_ps();
  for (int n = 0; n < N; ++n) {
    _mm512_mask_storeu_ps(y + n * out + o0, m0, _mm512_add_ps(acc[n][0], b0));
    _mm512_mask_storeu_ps(y + n * out + o0 + 16, m1, _mm512_add_ps(acc[n][1], b1));
  }
}

template <class WT>
void panel_group(int n, const float* x, const WT* w, const float* b, float* y, int64_t in,
                 int64_t out, int64_t p) {
  switch (n) {
    case 1: return panel_rows<1>(x, w, b, y, in, out, p);
    case 2: return panel_rows<2>(x, w, b, y, in, out, p);
    case 3: return panel_rows<3>(x, w, b, y, in, out, p);
    case 4: return panel_rows<4>(x, w, b, y, in, out, p);
    case 5: return panel_rows<5>(x, w, b, y, in, out, p);
    case 6: return panel_rows<6>(x, w, b, y, in, out, p);
    case 7: return panel_rows<7>(x, w, b, y, in, out, p);
    default: return panel_rows<8>(x, w, b, y, in, out, p);
  }
}

// x: [N, in] fp32 contiguous; panels: pack_panels(W) fp32 or bf16; b: [out] or undefined.
at::Tensor panel_linear(const at::Tensor& x, const at::Tensor& panels, const at::Tensor& b,
                        int64_t out) {
  const int64_t n_rows = x.size(0), in = x.size(1), n_panels = panels.size(0);
  at::Tensor y = at::empty({n_rows, out}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Chunks of at least ~64 KiB of weights (a thread hand-off is amortised) and about 8 per
  // thread: enough that a thread the OS deschedules leaves only a small share to the others,
  // few enough that claiming chunks costs nothing measurable (one panel per chunk was ~3 % of
  // a SmolLM2 step) and each thread streams several consecutive panels.
  const int64_t min_grain =
      std::max<int64_t>(1, 65536 / (in * kPanel * static_cast<int64_t>(panels.element_size())));
  const int64_t per_chunk = (n_panels + 8 * parallel::num_threads() - 1) / (8 * parallel::num_threads());
  const int64_t grain = std::max(min_grain, per_chunk);
  parallel::parallel_for(n_panels, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t r = 0; r < n_rows; r += 8) {
        const int n = static_cast<int>(std::min<int64_t>(8, n_rows - r));
        if (panels.scalar_type() == at::kBFloat16)
          panel_group(n, xp + r * in, panels.data_ptr<at::BFloat16>(), bp, yp + r * out, in,
                      out, p);
        else
          panel_group(n, xp + r * in, panels.data_ptr<float>(), bp, yp + r * out, in, out, p);
      }
  });
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

// x: [N, in], w: [out, in] (a slice of the rows of W), b: [out] or undefined -> [N, out],
// through one library kernel.
at::Tensor library_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, LinearPath path) {
  switch (path) {
    case LinearPath::kMv: {
      const at::Tensor v = x.reshape({x.size(1)});
      return (b.defined() ? at::addmv(b, w, v) : at::mv(w, v)).unsqueeze(0);
    }
    case LinearPath::kDnnl:
      return dnnl_linear(x, w.contiguous(), b);
    case LinearPath::kGemm:
      return b.defined() ? at::addmm(b, x, w.t()) : at::mm(x, w.t());
    case LinearPath::kBf16: {
      at::Tensor y = at::linear(x.to(at::kBFloat16), w).to(at::kFloat);
      return b.defined() ? y.add_(b) : y;
    }
    case LinearPath::kSkinny:
    case LinearPath::kAuto: break;
  }
  fail("Linear: unknown path");
}

}  // namespace

at::Tensor Linear::forward_path(const at::Tensor& x_in, LinearPath path) const {
  SD_CHECK(in_ > 0, "Linear: called on an empty (default-constructed) layer");
  SD_CHECK(x_in.defined() && x_in.dim() == 2, "Linear: input must be 2-D [N, in], got ",
           x_in.defined() ? x_in.sizes() : at::IntArrayRef{});
  SD_CHECK(x_in.size(1) == in_, "Linear: input has ", x_in.size(1), " features, weight expects ",
           in_, " (weight [", out_, ", ", in_, "])");
  SD_CHECK(x_in.scalar_type() == at::kFloat, "Linear: input must be float32, got ",
           x_in.scalar_type());
  const at::Tensor x = x_in.contiguous();
  const int64_t n = x.size(0);
  if (n == 0) return at::empty({0, out_}, x.options());
  if (path == LinearPath::kAuto) path = choose_path(n);

  const bool bf16 = dtype_ == at::kBFloat16;
  SD_CHECK(path == LinearPath::kSkinny || bf16 == (path == LinearPath::kBf16), "Linear: path ",
           linear_path_name(path), " does not match weight dtype ", dtype_);
  if (path == LinearPath::kSkinny) {
    SD_CHECK(linear_has_skinny(), "Linear: path skinny needs AVX-512F, which this CPU lacks");
    // A layer kept in library layout is packed per call: for tests, not for speed.
    return panel_linear(x, panels_.defined() ? panels_ : pack_panels(w_), b_, out_);
  }
  SD_CHECK(path != LinearPath::kMv || n == 1, "Linear: path mv needs exactly 1 row, got ", n);
  // Likewise a packed layer is unpacked per call for a forced library path.
  const at::Tensor w = w_.defined() ? w_ : unpack_panels(panels_, out_);
  // The library kernels run single-threaded (their OpenMP thread count is 1, see
  // core/parallel.h): the pool splits the outputs into a few slices per thread instead.
  at::Tensor y = at::empty({n, out_}, x.options());
  const int64_t slices = 4 * parallel::num_threads();
  parallel::parallel_for(out_, std::max<int64_t>(64, (out_ + slices - 1) / slices), [&](int64_t o0, int64_t o1) {
    const at::Tensor b = b_.defined() ? b_.narrow(0, o0, o1 - o0) : at::Tensor();
    y.narrow(1, o0, o1 - o0).copy_(library_linear(x, w.narrow(0, o0, o1 - o0), b, path));
  });
  return y;
}

}  // namespace specdec::model
