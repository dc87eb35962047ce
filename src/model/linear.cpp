// Linear: y = x W^T + b with the kernel picked by row count. See linear.h.
#include "model/linear.h"

#include "core/error.h"
#include "core/parallel.h"

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
  out_ = weight.size(0);
  in_ = weight.size(1);
  dtype_ = dtype;
  if (linear_policy() == LinearPolicy::kSkinny && linear_has_skinny())
    panels_ = PanelWeight::from_tensor(weight, dtype);
  else
    w_ = weight.to(dtype).contiguous();
}

Linear::Linear(PanelWeight weight, at::Tensor bias) : panels_(std::move(weight)) {
  SD_CHECK(panels_.defined(), "Linear: empty packed weight");
  out_ = panels_.out();
  in_ = panels_.in();
  if (bias.defined()) {
    SD_CHECK(bias.dim() == 1 && bias.size(0) == out_, "Linear: bias shape ", bias.sizes(),
             " does not match ", panels_.describe(), " weight [", out_, ", ", in_, "]");
    b_ = bias.to(at::kFloat).contiguous();
  }
}

int64_t Linear::in_features() const { return in_; }
int64_t Linear::out_features() const { return out_; }

at::Tensor Linear::weight() const {
  if (!panels_.defined()) return w_;
  at::Tensor w = panels_.dequantized();
  return panels_.native() ? w : w.to(dtype_);
}

at::Tensor Linear::rows(const at::Tensor& ids_in) const {
  const at::Tensor ids = ids_in.to(at::kLong).contiguous();
  const int64_t n = ids.numel();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    SD_CHECK(id[i] >= 0 && id[i] < out_, "Linear::rows: row ", id[i], " out of range [0, ", out_,
             ")");
  if (!panels_.defined()) return w_.index_select(0, ids).to(at::kFloat);
  return panels_.rows(ids);
}

int64_t Linear::weight_bytes() const {
  int64_t n = panels_.defined() ? panels_.bytes()
              : w_.defined()    ? w_.numel() * static_cast<int64_t>(w_.element_size())
                                : 0;
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
// time against a panel that stays in L2. (On a CPU without AVX-512 the AVX2 or the portable
// implementation runs instead, with the same properties: a row's result independent of the row
// count, and dtype native equal to float32, which the library kernels do not give.) Library layout (LinearPolicy::
// kLibrary): mv for 1 row (OpenBLAS gemm with M=1 is ~2x slower), dnnl for 2-8, gemm after;
// bf16 weights through oneDNN's at::linear.
LinearPath Linear::choose_path(int64_t n_rows) const {
  if (panels_.defined()) return LinearPath::kSkinny;
  if (dtype_ == at::kBFloat16) return LinearPath::kBf16;
  return library_path(n_rows);
}

LinearPath library_path(int64_t n_rows) {
  if (n_rows == 1) return LinearPath::kMv;
  if (n_rows <= 8) return LinearPath::kDnnl;
  return LinearPath::kGemm;
}

at::Tensor Linear::operator()(const at::Tensor& x) const {
  return forward_path(x, LinearPath::kAuto);
}

bool linear_has_skinny() { return true; }

namespace {

// x: [N, in] -> y: [N, out] via oneDNN's row-major sgemm, streaming W once for all rows.
at::Tensor dnnl_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
#ifdef SPECDEC_WITH_DNNL
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
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

at::Tensor one_row_mv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const at::Tensor v = x.reshape({x.size(1)});
  return (b.defined() ? at::addmv(b, w, v) : at::mv(w, v)).unsqueeze(0);
}

// x: [N, in], w: [out, in] (a slice of the rows of W), b: [out] or undefined -> [N, out],
// through one library kernel.
at::Tensor library_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, LinearPath path) {
  switch (path) {
    case LinearPath::kMv:
      return one_row_mv(x, w, b);
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

at::Tensor library_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return library_linear(x.contiguous(), w, b, library_path(x.size(0)));
}

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
    // A layer kept in library layout is packed per call: for tests, not for speed.
    return panels_.defined() ? panels_.forward(x, b_)
                             : PanelWeight::from_tensor(w_, dtype_).forward(x, b_);
  }
  SD_CHECK(path != LinearPath::kMv || n == 1, "Linear: path mv needs exactly 1 row, got ", n);
  // Likewise a packed layer is unpacked per call for a forced library path.
  const at::Tensor w = w_.defined() ? w_ : weight();
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
