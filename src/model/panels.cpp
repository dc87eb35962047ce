// Panel packing, the choice of kernel and the calls into it. See panels.h; the kernels
// themselves are in panels_avx512.cpp, panels_avx2.cpp and panels_portable.cpp
// (panels_kernels.h).
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): a quantised weight must be
// d * q rounded, then + m rounded, exactly as io::dequantize() computes it. (For GGUF's formats
// d * q is exact, at most 22 significant bits, so today a fused multiply-add would give the
// same bits; the flag keeps the order explicit for any format where it would not.)
#include "model/panels.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "io/mapped_file.h"
#include "model/panels_kernels.h"

namespace specdec::model {

using namespace panels_detail;

namespace {

// A buffer backed by 2 MiB pages where the kernel allows it (transparent huge pages in
// "madvise" mode, the usual default). Streaming weights through 4 KiB pages costs a TLB miss
// per page and restarts the hardware prefetchers at every page boundary (measured: a few per
// cent, results/engine.md). Not initialised: the packers write every byte, in parallel (the
// first touch, where the kernel zeroes each page, is a large part of the load time).
at::Tensor huge_page_bytes(int64_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (static_cast<size_t>(bytes) < kHuge) return at::empty({bytes}, at::kByte);
  const size_t size = (static_cast<size_t>(bytes) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  SD_CHECK(posix_memalign(&p, kHuge, size) == 0, "panels: cannot allocate ", bytes,
           " bytes of weights");
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP this is ordinary memory
  return at::from_blob(p, {bytes}, [](void* q) { std::free(q); }, at::kByte);
}

int64_t code_bytes_per_k(Code c) {  // bytes of one k's 32 weights
  switch (c) {
    case Code::kF32: return 4 * kPanel;
    case Code::kBF16:
    case Code::kF16: return 2 * kPanel;
    case Code::kNib4: return kPanel / 2;
    case Code::kInt8: return kPanel;
  }
  return 0;
}

// groups_per_block and sub only for quantised codes (see Segment).
Segment make_segment(Code code, int64_t group, int64_t groups_per_block, bool sub, Add add,
                     int64_t in, int64_t out0, int64_t out, int64_t panel0) {
  Segment s;
  s.code = code;
  s.add = add;
  s.group = group;
  s.groups_per_block = groups_per_block;
  s.sub = sub;
  s.out0 = out0;
  s.out = out;
  s.panel0 = panel0;
  s.n_panels = (out + kPanel - 1) / kPanel;
  const int64_t halves = s.add == Add::kMin ? 2 : 1;  // D only, or D and M / Dmin
  s.header_bytes = is_quantised(code) ? halves * kPanel * 2 : 0;
  s.sub_bytes = sub ? halves * kPanel : 0;
  s.group_bytes = s.sub_bytes + group * code_bytes_per_k(code);
  s.data = huge_page_bytes(s.n_panels * s.panel_bytes(in));
  return s;
}

}  // namespace

namespace {

// The kernels forward() calls, chosen once per process (panels.h).
struct Dispatch {
  const char* name;       // of the fp32-activation kernels
  const char* int8_name;  // of the int8 ones
  const Kernels& (*f32_kernels)();
  const Kernels& (*kernels)(const Segment&);
  RowsQ8Fn (*q8_kernel)(const Segment&, int);
  QuantizeFn quantize;  // int8 activations, with the int8 kernels
  RowsAmxFn (*amx_kernel)(const Segment&) = nullptr;  // prefill rows, where usable
};

Dispatch choose_dispatch() {
  const char* env = std::getenv("SPECDEC_KERNELS");
  const std::string want = env ? env : "";
  SD_CHECK(want.empty() || want == "auto" || want == "portable" || want == "no-amx", "SPECDEC_KERNELS='",
           want, "' is not a kernel choice (use auto, no-amx or portable)");
  Dispatch d{"portable", "portable", portable::f32_kernels, portable::kernels,
             portable::q8_kernel, portable::quantize};
#if SPECDEC_PANELS_X86
  if (want != "portable" && avx2::supported()) {
    d.name = d.int8_name = "avx2";
    d.f32_kernels = avx2::f32_kernels;
    d.kernels = avx2::kernels;
    d.q8_kernel = avx2::q8_kernel;  // the portable quantisation: the same bits
  }
  if (want != "portable" && __builtin_cpu_supports("avx512f")) {
    d.name = "avx512";
    d.f32_kernels = avx512::f32_kernels;
    d.kernels = avx512::kernels;
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni")) {
      d.int8_name = "avx512-vnni";
      d.q8_kernel = avx512::q8_kernel;
      d.quantize = avx512::quantize;
      if (want != "no-amx" && avx512::amx_usable()) {
        d.int8_name = "avx512-vnni+amx";
        d.amx_kernel = avx512::amx_kernel;
      }
    }
  }
#endif
  return d;
}

const Dispatch& dispatch() {
  static const Dispatch d = choose_dispatch();  // a throw leaves it to the next call
  return d;
}

}  // namespace

namespace panels_detail {

// int8 activations (dtype native_q8): the formula is in panels_kernels.h.
QuantizedRows::QuantizedRows(const float* x, int64_t n, int64_t in_) : in(in_) {
  SD_CHECK(in % 32 == 0, "panels: int8 activations need a multiple of 32 columns, got ", in);
  xq.resize(static_cast<size_t>(n * in));
  scale.resize(static_cast<size_t>(n * in / 32));
  qsum.resize(static_cast<size_t>(n * in / 16));
  xsum.resize(static_cast<size_t>(n * in / 16));
  dispatch().quantize(x, n * in / 32, *this);
}

}  // namespace panels_detail

const char* panels_kernel() { return dispatch().name; }
const char* panels_int8_kernel() { return dispatch().int8_name; }


int64_t rope_hf_row(int64_t row, int64_t out, int64_t n_heads) {
  const int64_t hd = out / n_heads, half = hd / 2;
  const int64_t h = row / hd, r = row % hd;
  return h * hd + (r % 2) * half + r / 2;
}

// ---- packing ---------------------------------------------------------------------------------

PanelWeight PanelWeight::from_tensor(const at::Tensor& w_in, at::ScalarType dtype) {
  SD_CHECK(w_in.defined() && w_in.dim() == 2 && w_in.size(0) > 0 && w_in.size(1) > 0,
           "panels: weight must be a non-empty 2-D [out, in] tensor");
  SD_CHECK(dtype == at::kFloat || dtype == at::kBFloat16,
           "panels: dtype must be float32 or bfloat16, got ", dtype);
  PanelWeight pw;
  pw.out_ = w_in.size(0);
  pw.in_ = w_in.size(1);
  pw.tensor_dtype_ = dtype;
  const Code code = dtype == at::kFloat ? Code::kF32 : Code::kBF16;
  Segment s = make_segment(code, pw.in_, 1, false, Add::kNone, pw.in_, 0, pw.out_, 0);
  s.type = dtype == at::kFloat ? io::GgmlType::F32 : io::GgmlType::BF16;
  // [out, in] -> [n_panels, in, 32], zero-padded past `out`.
  const at::Tensor w = w_in.to(dtype).contiguous();
  at::Tensor padded = at::zeros({s.n_panels * kPanel, pw.in_}, w.options());
  padded.narrow(0, 0, pw.out_).copy_(w);
  // Copied by ATen's threads (the loader gives them all cores).
  at::from_blob(s.data.data_ptr(), {s.n_panels, pw.in_, kPanel}, w.options())
      .copy_(padded.view({s.n_panels, kPanel, pw.in_}).transpose(1, 2));
  pw.n_panels_ = s.n_panels;
  pw.segs_.push_back(std::move(s));
  return pw;
}

namespace {

// One part into its segment. Panel by panel (in parallel): the 32 rows' blocks are unpacked
// side by side (io::unpack_block), then written k-major, so the panel is written in order.
void pack_part(const QuantBlocks& part, Segment& s, int64_t in) {
  const io::GgmlType t = part.type;
  const int64_t bs = io::ggml_block_size(t), ts = io::ggml_type_size(t);
  const int64_t row_bytes = in / bs * ts;
  const int64_t panel_bytes = s.panel_bytes(in);
  uint8_t* base = static_cast<uint8_t*>(s.data.data_ptr());
  // GGUF row of HF output o.
  std::vector<int64_t> src_row(static_cast<size_t>(part.out));
  for (int64_t r = 0; r < part.out; ++r)
    src_row[static_cast<size_t>(part.rope_heads > 0 ? rope_hf_row(r, part.out, part.rope_heads) : r)] = r;
  const auto row_of = [&](int64_t p, int64_t j) {
    return part.data + src_row[static_cast<size_t>(p * kPanel + j)] * row_bytes;
  };
  parallel::parallel_for(s.n_panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<io::BlockCodes> rows(kPanel);
    for (int64_t p = p0; p < p1; ++p) {
      uint8_t* panel = base + p * panel_bytes;
      const int64_t valid = std::min(kPanel, part.out - p * kPanel);
      std::memset(panel, 0, static_cast<size_t>(panel_bytes));  // padding outputs stay 0
      if (!is_quantised(s.code)) {  // F32, F16, BF16: the source's own bits, transposed
        const int64_t size = code_bytes_per_k(s.code) / kPanel;
        for (int64_t j = 0; j < valid; ++j)
          for (int64_t k = 0; k < in; ++k)
            std::memcpy(panel + (k * kPanel + j) * size, row_of(p, j) + k * size, static_cast<size_t>(size));
        continue;
      }
      for (int64_t j = valid; j < kPanel; ++j) {  // absent outputs: weight 0 (scales 0)
        io::BlockCodes& r = rows[j];
        std::fill(std::begin(r.q), std::end(r.q), static_cast<int8_t>(-s.offset));
        r.dh = r.mh = 0;
        std::fill(std::begin(r.sub_d), std::end(r.sub_d), int16_t{0});
        std::fill(std::begin(r.sub_m), std::end(r.sub_m), int16_t{0});
      }
      const bool min = s.add == Add::kMin;
      for (int64_t blk = 0; blk < in / bs; ++blk) {
        for (int64_t j = 0; j < valid; ++j) io::unpack_block(t, row_of(p, j) + blk * ts, rows[j]);
        uint8_t* block = panel + blk * s.block_bytes();  // a GGUF block is a panel block
        uint16_t* header = reinterpret_cast<uint16_t*>(block);
        for (int64_t j = 0; j < kPanel; ++j) {
          header[j] = rows[j].dh;
          if (min) header[kPanel + j] = rows[j].mh;
        }
        for (int64_t g = 0; g < s.groups_per_block; ++g) {
          uint8_t* group = block + s.header_bytes + g * s.group_bytes;
          for (int64_t j = 0; s.sub && j < kPanel; ++j) {
            group[j] = static_cast<uint8_t>(rows[j].sub_d[g]);  // Q6_K: the signed byte
            if (min) group[kPanel + j] = static_cast<uint8_t>(rows[j].sub_m[g]);
          }
          uint8_t* codes = group + s.sub_bytes;
          for (int64_t k = 0; k < s.group; ++k) {
            const int64_t e = g * s.group + k;  // element of the block
            if (s.code == Code::kInt8) {
              for (int64_t j = 0; j < kPanel; ++j) codes[code_byte(s, k, j)] = static_cast<uint8_t>(rows[j].q[e]);
            } else {  // output j in the low nibble, j + 16 in the high
              for (int64_t j = 0; j < kPanel / 2; ++j)
                codes[code_byte(s, k, j)] = static_cast<uint8_t>((rows[j].q[e] + s.offset) |
                                                                 ((rows[j + 16].q[e] + s.offset) << 4));
            }
          }
        }
      }
    }
  });
  // The pages wholly inside the tensor: nothing else lives there.
  if (part.file_mapped) io::drop_mapped_pages(part.data, static_cast<size_t>(part.out * row_bytes));
}

}  // namespace

PanelWeight PanelWeight::from_blocks(const std::vector<QuantBlocks>& parts, bool int8_dot) {
  SD_CHECK(!parts.empty(), "panels: no tensors to pack");
  PanelWeight pw;
  pw.native_ = true;
  pw.in_ = parts.front().in;
  for (const QuantBlocks& part : parts) {
    using io::GgmlType;
    const GgmlType t = part.type;
    SD_CHECK(part.defined() && part.out > 0 && part.in > 0, "panels: tensor ", part.name,
             " is empty");
    SD_CHECK(part.in == pw.in_, "panels: tensor ", part.name, " has ", part.in,
             " columns, the tensors stacked with it ", pw.in_);
    SD_CHECK(io::ggml_type_supported(t), "tensor ", part.name, ": ggml type ",
             io::ggml_type_name(t),
             " cannot be kept native (supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)");
    SD_CHECK(part.in % io::ggml_block_size(t) == 0, "tensor ", part.name, ": ", part.in,
             " columns is not a multiple of the ", io::ggml_type_name(t), " block size ",
             io::ggml_block_size(t));
    SD_CHECK(part.rope_heads <= 0 || part.out % (2 * part.rope_heads) == 0, "tensor ", part.name,
             ": ", part.out, " rows are not ", part.rope_heads, " heads x an even head_dim");
    Segment s;
    if (io::ggml_type_has_codes(t)) {
      io::BlockCodes b;
      io::unpack_block(t, part.data, b);  // the group and the add rule are the type's
      const bool nib4 = t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q4_K;
      s = make_segment(nib4 ? Code::kNib4 : Code::kInt8, b.group, b.n / b.group, b.n_sub > 0,
                       b.add, pw.in_, pw.out_, part.out, pw.n_panels_);
      s.offset = t == GgmlType::Q4_0 ? 8 : 0;
      s.int8_dot = int8_dot;
      // The int8 kernels fix the group and the nib4 offset at compile time (kQ8Group, kQ8Offset).
      const bool min = s.add == Add::kMin, nib = s.code == Code::kNib4;
      SD_CHECK(!int8_dot || (s.group == (!nib && s.sub && !min ? kQ8Group<false, false, true> : 32) &&
                             (!nib || s.offset == (min ? 0 : kQ8Offset<true, false>))),
               "panels: tensor ", part.name, " (", io::ggml_type_name(t), ", group ", s.group,
               ") does not have the layout of its int8 kernel");
    } else {
      const Code code = t == GgmlType::F16 ? Code::kF16 : t == GgmlType::BF16 ? Code::kBF16 : Code::kF32;
      s = make_segment(code, pw.in_, 1, false, Add::kNone, pw.in_, pw.out_, part.out, pw.n_panels_);
    }
    s.type = t;
    pack_part(part, s, pw.in_);
    pw.out_ += s.out;
    pw.n_panels_ += s.n_panels;
    pw.segs_.push_back(std::move(s));
  }
  return pw;
}

// ---- use -------------------------------------------------------------------------------------

int64_t PanelWeight::bytes() const {
  int64_t n = 0;
  for (const Segment& s : segs_) n += s.data.numel();
  return n;
}

std::string PanelWeight::describe() const {
  if (!native_) return tensor_dtype_ == at::kFloat ? "f32" : "bf16";
  std::string out;
  std::set<std::string> seen;
  bool q8 = false;
  for (const Segment& s : segs_) {
    const std::string name = io::ggml_type_name(s.type);
    if (seen.insert(name).second) out += (out.empty() ? "" : "+") + name;
    q8 = q8 || s.int8_dot;
  }
  return q8 ? out + "/q8" : out;
}

const PanelWeight::Segment& PanelWeight::segment_of_panel(int64_t p) const {
  for (const Segment& s : segs_)
    if (p < s.panel0 + s.n_panels) return s;
  fail("panels: panel ", p, " out of range");
}

const PanelWeight::Segment& PanelWeight::segment_of_output(int64_t o) const {
  for (const Segment& s : segs_)
    if (o < s.out0 + s.out) return s;
  fail("panels: output ", o, " out of range");
}

void PanelWeight::decode_row(int64_t o, float* dst) const {
  const Segment& s = segment_of_output(o);
  const int64_t lo = o - s.out0, j = lo % kPanel;
  const uint8_t* panel = static_cast<const uint8_t*>(s.data.data_ptr()) + lo / kPanel * s.panel_bytes(in_);
  const bool min = s.add == Add::kMin;
  for (int64_t k0 = 0; k0 < in_; k0 += s.group) {
    const int64_t gi = k0 / s.group;  // group index in the panel
    const uint8_t* block = panel + gi / s.groups_per_block * s.block_bytes();
    const uint8_t* g = block + s.header_bytes + gi % s.groups_per_block * s.group_bytes;
    const uint8_t* codes = g + s.sub_bytes;
    float d = 0, m = 0;  // as io::BlockCodes
    if (is_quantised(s.code)) {
      uint16_t dh, mh = 0;
      std::memcpy(&dh, block + 2 * j, 2);
      if (min) std::memcpy(&mh, block + 2 * (kPanel + j), 2);
      d = io::fp16_to_fp32(dh);
      m = io::fp16_to_fp32(mh);
      if (s.sub) {
        d = d * static_cast<float>(min ? static_cast<int>(g[j]) : static_cast<int8_t>(g[j]));
        m = -(m * static_cast<float>(g[kPanel + j]));
      }
    }
    for (int64_t k = 0; k < s.group; ++k) {
      float v = 0;
      switch (s.code) {
        case Code::kF32: std::memcpy(&v, codes + 4 * (k * kPanel + j), 4); break;
        case Code::kBF16:
        case Code::kF16: {
          uint16_t h;
          std::memcpy(&h, codes + 2 * (k * kPanel + j), 2);
          v = s.code == Code::kBF16 ? io::bf16_to_fp32(h) : io::fp16_to_fp32(h);
          break;
        }
        case Code::kNib4:
        case Code::kInt8: {
          const uint8_t byte = codes[code_byte(s, k, j)];
          const int q = s.code == Code::kInt8 ? static_cast<int8_t>(byte)
                                              : (j < 16 ? byte & 0x0F : byte >> 4) - s.offset;
          v = d * static_cast<float>(q);  // the order of io::BlockCodes
          if (s.add == Add::kZero) v = v + 0.0f;
          if (s.add == Add::kMin) v = v + m;
          break;
        }
      }
      dst[k0 + k] = v;
    }
  }
}

at::Tensor PanelWeight::rows(const at::Tensor& ids_in) const {
  const at::Tensor ids = ids_in.to(at::kLong).contiguous();
  const int64_t n = ids.numel();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    SD_CHECK(id[i] >= 0 && id[i] < out_, "panels: row ", id[i], " out of range [0, ", out_, ")");
  at::Tensor out = at::empty({n, in_}, at::kFloat);
  for (int64_t i = 0; i < n; ++i) decode_row(id[i], out.data_ptr<float>() + i * in_);
  return out;
}

at::Tensor PanelWeight::dequantized() const {
  at::Tensor out = at::empty({out_, in_}, at::kFloat);
  parallel::parallel_for(out_, 64, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) decode_row(o, out.data_ptr<float>() + o * in_);
  });
  return out;
}

at::Tensor PanelWeight::forward(const at::Tensor& x, const at::Tensor& b) const {
  SD_CHECK(defined(), "panels: forward on an empty weight");
  const Dispatch& kernels = dispatch();
  const int64_t n_rows = x.size(0);
  at::Tensor y = at::empty({n_rows, out_}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Chunks of at least ~64 KiB of weights (a thread hand-off is amortised) and about 8 per
  // thread: enough that a thread the OS deschedules leaves only a small share to the others,
  // few enough that claiming chunks costs nothing measurable (one panel per chunk was ~3 % of
  // a SmolLM2 step) and each thread streams several consecutive panels.
  const int64_t min_grain = std::max<int64_t>(1, 65536 * n_panels_ / std::max<int64_t>(1, bytes()));
  const int64_t per_chunk = (n_panels_ + 8 * parallel::num_threads() - 1) / (8 * parallel::num_threads());
  std::unique_ptr<QuantizedRows> xr;  // int8 rows, once per call, when a segment needs them
  for (const Segment& s : segs_)
    if (s.int8_dot && !xr) xr = std::make_unique<QuantizedRows>(xp, n_rows, in_);
  parallel::parallel_for(n_panels_, std::max(min_grain, per_chunk), [&](int64_t p0, int64_t p1) {
    // Prefill: a quantised panel is decoded once into an fp32 panel (in L2) that all row
    // groups then read, instead of being decoded again for every 8 rows.
    thread_local std::vector<float> decoded;
    for (int64_t p = p0; p < p1; ++p) {
      const Segment& s = segment_of_panel(p);
      const int64_t lp = p - s.panel0, o0 = s.out0 + lp * kPanel;
      PanelJob job = panel_job(s, lp, in_, bp);
      if (s.int8_dot) {
        int64_t r = 0;
        if (kernels.amx_kernel && n_rows >= kAmxMinRows) {  // prefill: 8 rows a pass, the rest below
          r = n_rows / kAmxRows * kAmxRows;
          kernels.amx_kernel(s)(job, *xr, 0, r, yp + o0, out_);
        }
        for (; r < n_rows; r += kQ8Rows) {
          const int n = static_cast<int>(std::min<int64_t>(kQ8Rows, n_rows - r));
          kernels.q8_kernel(s, n)(job, *xr, r, yp + r * out_ + o0, out_);
        }
        continue;
      }
      const Kernels* k = &kernels.kernels(s);
      if (n_rows > 8 && is_quantised(s.code)) {
        decoded.resize(static_cast<size_t>(in_ * kPanel));
        k->decode(job, decoded.data());
        job = PanelJob{reinterpret_cast<const uint8_t*>(decoded.data()), in_, in_, 1, 0, 0,
                       in_ * 4 * kPanel, in_ * 4 * kPanel, job.bias, job.valid};
        k = &kernels.f32_kernels();
      }
      for (int64_t r = 0; r < n_rows; r += 8) {
        const int n = static_cast<int>(std::min<int64_t>(8, n_rows - r));
        k->rows[n](job, xp + r * in_, yp + r * out_ + o0, out_);
      }
    }
  });
  return y;
}

}  // namespace specdec::model
