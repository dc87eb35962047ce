// dtype native: GGUF blocks packed into panels (model/panels.h). For every supported type, on
// random blocks, the packed weight decodes to exactly io::dequantize's values, and the panel
// kernel's outputs are bit-identical to the float32 path (the same kernel on fp32 panels of
// the dequantised weights) for decode, verification and prefill row counts. A planted bug
// (the Q4_K "+ m" fused into an FMA, or Q4_0's offset of 8 dropped) fails these tests.
// Every test runs with the kernel this process picked (panels_kernel()): ctest runs this file
// twice on an AVX-512 or AVX2 machine, the second time with SPECDEC_KERNELS=portable, and a
// -DSPECDEC_PORTABLE=ON build has only the portable kernel.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "io/dequant.h"
#include "model/linear.h"
#include "model/loader.h"
#include "model/panels.h"
#include "model/panels_kernels.h"
#include "tests/support/random_gguf.h"

using namespace specdec;
using namespace specdec::model;
using io::GgmlType;
using specdec::testing::random_tensor;

namespace {

QuantBlocks view(GgmlType t, const std::vector<uint8_t>& bytes, int64_t out, int64_t in,
                 int64_t rope_heads = 0) {
  QuantBlocks q;
  q.name = std::string("test ") + io::ggml_type_name(t);
  q.type = t;
  q.data = bytes.data();
  q.out = out;
  q.in = in;
  q.rope_heads = rope_heads;
  return q;
}

at::Tensor dequantize(GgmlType t, const std::vector<uint8_t>& bytes, int64_t out, int64_t in) {
  at::Tensor w = at::empty({out, in}, at::kFloat);
  io::dequantize(t, bytes.data(), w.data_ptr<float>(), out * in);
  return w;
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::F16,  GgmlType::BF16, GgmlType::F32};

class Panels : public ::testing::TestWithParam<GgmlType> {
 protected:
  void SetUp() override {
    parallel::set_num_threads(2);
  }
};

// 70 outputs: two full panels and a partial one; 512 inputs: two K-quant super-blocks.
TEST_P(Panels, DecodesToDequantizeAndMatchesFloat32BitForBit) {
  const GgmlType t = GetParam();
  const int64_t out = 70, in = 512;
  const auto bytes = random_tensor(t, out, in, 7);
  const PanelWeight native = PanelWeight::from_blocks({view(t, bytes, out, in)});
  const at::Tensor w = dequantize(t, bytes, out, in);
  EXPECT_EQ(native.out(), out);
  EXPECT_EQ(native.in(), in);
  EXPECT_EQ(native.describe(), io::ggml_type_name(t));
  ASSERT_TRUE(bit_equal(native.dequantized(), w)) << "packed weights decode differently";
  const at::Tensor ids = at::tensor({69, 0, 33, 31}, at::kLong);
  EXPECT_TRUE(bit_equal(native.rows(ids), w.index_select(0, ids)));

  const PanelWeight f32 = PanelWeight::from_tensor(w, at::kFloat);
  const at::Tensor bias = at::randn({out}, at::kFloat);
  for (int64_t n : {1, 2, 5, 8, 9, 17, 40}) {
    const at::Tensor x = at::randn({n, in}, at::kFloat);
    const at::Tensor y = native.forward(x, bias);
    EXPECT_TRUE(bit_equal(y, f32.forward(x, bias))) << n << " rows";
    // Both paths could share a mistake: the reference matmul bounds it (fp32 summation order
    // differs; a wrong weight moves outputs by ~|w||x|, far above 1e-5 of the largest output).
    const at::Tensor ref = at::addmm(bias, x, w.t());
    EXPECT_LE((y - ref).abs().max().item<float>(), 1e-5f * ref.abs().max().item<float>()) << n << " rows";
    // A row's result does not depend on the rows beside it.
    EXPECT_TRUE(bit_equal(y.narrow(0, n - 1, 1), native.forward(x.narrow(0, n - 1, 1).contiguous(), bias)));
  }
}

// dtype native_q8: int8 activations. The only error is x's rounding to the int8 grid, at most
// half a step (max|x| / 127 per 32 values) per value; each output's error is bounded by
// sum_k |w[o, k]| * step(k) / 2, plus fp32 rounding of the sums (1e-5 of sum |w x|).
TEST_P(Panels, Int8ActivationsWithinTheQuantisationBound) {
  const GgmlType t = GetParam();
  if (!io::ggml_type_has_codes(t)) GTEST_SKIP() << "float types keep fp32 activations";
  const int64_t out = 70, in = 512;
  const auto bytes = random_tensor(t, out, in, 8);
  const PanelWeight q8 = PanelWeight::from_blocks({view(t, bytes, out, in)}, /*int8_dot=*/true);
  const at::Tensor w = dequantize(t, bytes, out, in);
  EXPECT_EQ(q8.describe(), std::string(io::ggml_type_name(t)) + "/q8");
  ASSERT_TRUE(bit_equal(q8.dequantized(), w)) << "quad-major codes decode differently";
  const at::Tensor bias = at::randn({out}, at::kFloat);
  for (int64_t n : {1, 3, 5, 9, 17, 40}) {  // 17 and 40: prefills (AMX where the CPU has it)
    const at::Tensor x = at::randn({n, in}, at::kFloat);
    const at::Tensor y = q8.forward(x, bias);
    const at::Tensor ref = at::addmm(bias, x, w.t());
    const at::Tensor half_step =
        (x.view({n, in / 32, 32}).abs().amax(2, true) / 127.0 / 2.0).expand({n, in / 32, 32}).reshape({n, in});
    const at::Tensor bound = at::mm(half_step, w.abs().t()) + 1e-5 * at::mm(x.abs(), w.abs().t());
    const at::Tensor err = (y - ref).abs();
    EXPECT_TRUE((err <= bound).all().item<bool>())
        << n << " rows: worst error / bound " << (err / bound).max().item<float>();
    EXPECT_GT(err.max().item<float>(), 0.0f) << "int8 activations should differ from fp32";
    EXPECT_TRUE(bit_equal(y.narrow(0, n - 1, 1), q8.forward(x.narrow(0, n - 1, 1).contiguous(), bias)));
  }
}

// The AVX2 int8 kernel (panels_avx2.cpp), called directly on every panel of a weight (two full
// panels and a partial one) for 1-5 rows: bit for bit the AVX512-VNNI kernel's where the CPU has
// that one, and everywhere the portable kernel's up to the one rounding they differ in (a fused
// multiply-add per step: at most 1e-5 of sum |w x|). Row 0 is +-1 throughout, so every int8
// activation is +-127 and every pair of large codes would saturate vpmaddubsw's int16 sum:
// signed codes multiplied as they are stored (without the sign trick) fail here by far.
TEST_P(Panels, Int8Avx2KernelEqualsTheVnniOne) {
#if SPECDEC_PANELS_X86
  if (!panels_detail::avx2::supported()) GTEST_SKIP() << "no AVX2, FMA and F16C";
  const GgmlType t = GetParam();
  if (!io::ggml_type_has_codes(t)) GTEST_SKIP() << "float types keep fp32 activations";
  namespace pd = panels_detail;
  const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vnni");
  const int64_t out = 70, in = 512, rows = pd::kQ8Rows;
  const auto bytes = random_tensor(t, out, in, 9);
  const PanelWeight w = PanelWeight::from_blocks({view(t, bytes, out, in)}, /*int8_dot=*/true);
  at::Tensor x = at::randn({rows, in}, at::kFloat), bias = at::randn({out}, at::kFloat);
  x[0] = at::randn({in}, at::kFloat).sign();
  const pd::QuantizedRows xr(x.data_ptr<float>(), rows, in);
  ASSERT_EQ(xr.xq[0] == 127 || xr.xq[0] == -127, true);
  const at::Tensor bound = 1e-5 * at::mm(x.abs(), dequantize(t, bytes, out, in).abs().t());
  for (int64_t p = 0; p < 3; ++p) {
    const PanelWeight::Segment& s = w.segment_of_panel(p);
    const pd::PanelJob job = pd::panel_job(s, p - s.panel0, in, bias.data_ptr<float>());
    for (int n = 1; n <= rows; ++n) {
      at::Tensor a = at::zeros({n, pd::kPanel}, at::kFloat), b = at::zeros_like(a);
      pd::avx2::q8_kernel(s, n)(job, xr, 0, a.data_ptr<float>(), pd::kPanel);
      pd::portable::q8_kernel(s, n)(job, xr, 0, b.data_ptr<float>(), pd::kPanel);
      const at::Tensor err = (a - b).abs().narrow(1, 0, job.valid);
      const at::Tensor lim = bound.narrow(0, 0, n).narrow(1, p * pd::kPanel, job.valid);
      EXPECT_TRUE((err <= lim).all().item<bool>())
          << "panel " << p << ", " << n << " rows: worst difference / bound " << (err / lim).max().item<float>();
      if (vnni) {
        at::Tensor c = at::zeros_like(a);
        pd::avx512::q8_kernel(s, n)(job, xr, 0, c.data_ptr<float>(), pd::kPanel);
        EXPECT_TRUE(bit_equal(a, c)) << "panel " << p << ", " << n << " rows";
      }
    }
  }
#else
  GTEST_SKIP() << "this build has only the portable kernels";
#endif
}

// The AMX kernel (panels_avx512.cpp, the prefill's runs of 8 rows), called directly on every
// panel of a weight (two full panels and a partial one) for 8, 16 and 24 rows from row 0 and 16
// rows from row 8: bit for bit the AVX512-VNNI kernel's, as it must be (a prompt's rows and a
// decode's give the same outputs). Rows 0 and 9 are +-1 throughout (every activation +-127).
// Planted bugs caught here: Q4_0's offset of 8 left out (Q4_0), signed codes multiplied as
// unsigned (Q5_0, Q8_0, Q6_K).
TEST_P(Panels, Int8AmxKernelEqualsTheVnniOne) {
#if SPECDEC_PANELS_X86
  namespace pd = panels_detail;
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vnni") || !pd::avx512::amx_usable())
    GTEST_SKIP() << "no AVX512-VNNI and AMX-INT8 on this CPU (or the kernel refuses AMX's state)";
  const GgmlType t = GetParam();
  if (!io::ggml_type_has_codes(t)) GTEST_SKIP() << "float types keep fp32 activations";
  const int64_t out = 70, in = 512, rows = 24;
  const auto bytes = random_tensor(t, out, in, 11);
  const PanelWeight w = PanelWeight::from_blocks({view(t, bytes, out, in)}, /*int8_dot=*/true);
  at::Tensor x = at::randn({rows, in}, at::kFloat), bias = at::randn({out}, at::kFloat);
  x[0] = at::randn({in}, at::kFloat).sign();
  x[9] = at::randn({in}, at::kFloat).sign();
  const pd::QuantizedRows xr(x.data_ptr<float>(), rows, in);
  for (int64_t p = 0; p < 3; ++p) {
    const PanelWeight::Segment& s = w.segment_of_panel(p);
    const pd::PanelJob job = pd::panel_job(s, p - s.panel0, in, bias.data_ptr<float>());
    for (const auto& [r0, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {0, 16}, {0, 24}, {8, 16}}) {
      at::Tensor a = at::zeros({n, pd::kPanel}, at::kFloat), b = at::ones_like(a);
      pd::avx512::amx_kernel(s)(job, xr, r0, n, a.data_ptr<float>(), pd::kPanel);
      for (int64_t r = 0; r < n; r += pd::kQ8Rows) {
        const int m = static_cast<int>(std::min<int64_t>(pd::kQ8Rows, n - r));
        pd::avx512::q8_kernel(s, m)(job, xr, r0 + r, b.data_ptr<float>() + r * pd::kPanel, pd::kPanel);
      }
      EXPECT_TRUE(bit_equal(a.narrow(1, 0, job.valid).contiguous(), b.narrow(1, 0, job.valid).contiguous()))
          << "panel " << p << ", rows " << r0 << ".." << r0 + n - 1 << ": worst difference "
          << (a - b).abs().narrow(1, 0, job.valid).max().item<float>();
    }
  }
#else
  GTEST_SKIP() << "this build has only the portable kernels";
#endif
}

// The AVX2 fp32-activation kernels (panels_avx2.cpp), called directly on every panel (two full
// and a partial one) for 1-8 rows, and their decode: bit for bit the AVX-512 kernels' where the
// CPU has AVX-512F (one FMA chain per output in both, 8 lanes a register against 16), and
// everywhere the portable kernels' up to the rounding they differ in: a product rounded before
// its sum, once per step, at most 2 K u sum |w x| over K = 512 steps (6e-5 of it) in the worst
// case and ~sqrt(K) u (1.4e-6) for random roundings; 1e-5 lies between. The decode is exact in
// all three. A wrong weight moves an output by ~|w x|, far above it.
TEST_P(Panels, Fp32Avx2KernelsEqualTheAvx512Ones) {
#if SPECDEC_PANELS_X86
  if (!panels_detail::avx2::supported()) GTEST_SKIP() << "no AVX2, FMA and F16C";
  namespace pd = panels_detail;
  const GgmlType t = GetParam();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int64_t out = 70, in = 512, rows = 8;
  const auto bytes = random_tensor(t, out, in, 10);
  const PanelWeight w = PanelWeight::from_blocks({view(t, bytes, out, in)});
  const at::Tensor x = at::randn({rows, in}, at::kFloat), bias = at::randn({out}, at::kFloat);
  const at::Tensor bound = 1e-5 * at::mm(x.abs(), dequantize(t, bytes, out, in).abs().t());
  for (int64_t p = 0; p < 3; ++p) {
    const PanelWeight::Segment& s = w.segment_of_panel(p);
    const pd::PanelJob job = pd::panel_job(s, p - s.panel0, in, bias.data_ptr<float>());
    at::Tensor da = at::empty({in, pd::kPanel}, at::kFloat), db = at::empty_like(da);
    pd::avx2::kernels(s).decode(job, da.data_ptr<float>());
    pd::portable::kernels(s).decode(job, db.data_ptr<float>());
    EXPECT_TRUE(bit_equal(da, db)) << "panel " << p << " decodes differently";
    for (int n = 1; n <= rows; ++n) {
      at::Tensor a = at::zeros({n, pd::kPanel}, at::kFloat), b = at::zeros_like(a);
      pd::avx2::kernels(s).rows[n](job, x.data_ptr<float>(), a.data_ptr<float>(), pd::kPanel);
      pd::portable::kernels(s).rows[n](job, x.data_ptr<float>(), b.data_ptr<float>(), pd::kPanel);
      const at::Tensor err = (a - b).abs().narrow(1, 0, job.valid);
      const at::Tensor lim = bound.narrow(0, 0, n).narrow(1, p * pd::kPanel, job.valid);
      EXPECT_TRUE((err <= lim).all().item<bool>())
          << "panel " << p << ", " << n << " rows: worst difference / bound " << (err / lim).max().item<float>();
      if (avx512) {
        at::Tensor c = at::zeros_like(a);
        pd::avx512::kernels(s).rows[n](job, x.data_ptr<float>(), c.data_ptr<float>(), pd::kPanel);
        EXPECT_TRUE(bit_equal(a, c)) << "panel " << p << ", " << n << " rows";
      }
    }
  }
#else
  GTEST_SKIP() << "this build has only the portable kernels";
#endif
}

INSTANTIATE_TEST_SUITE_P(EveryType, Panels, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(io::ggml_type_name(info.param)); });

TEST(PanelsStacked, MixedTypesEqualTheirConcatenation) {
  const int64_t in = 256;
  const auto a = random_tensor(GgmlType::Q4_K, 64, in, 1);
  const auto b = random_tensor(GgmlType::Q6_K, 40, in, 2);  // ends mid-panel
  const auto c = random_tensor(GgmlType::Q8_0, 32, in, 3);
  const PanelWeight w = PanelWeight::from_blocks(
      {view(GgmlType::Q4_K, a, 64, in), view(GgmlType::Q6_K, b, 40, in), view(GgmlType::Q8_0, c, 32, in)});
  EXPECT_EQ(w.out(), 136);
  EXPECT_EQ(w.describe(), "Q4_K+Q6_K+Q8_0");
  const at::Tensor ref = at::cat({dequantize(GgmlType::Q4_K, a, 64, in), dequantize(GgmlType::Q6_K, b, 40, in),
                                  dequantize(GgmlType::Q8_0, c, 32, in)});
  EXPECT_TRUE(bit_equal(w.dequantized(), ref));
  const at::Tensor x = at::randn({5, in}, at::kFloat);
  EXPECT_TRUE(bit_equal(w.forward(x, at::Tensor()), PanelWeight::from_tensor(ref, at::kFloat).forward(x, at::Tensor())));
  // Through Linear, as the model uses it.
  const Linear lin(PanelWeight::from_blocks({view(GgmlType::Q4_K, a, 64, in)}), at::Tensor());
  EXPECT_TRUE(lin.native());
  EXPECT_EQ(lin.describe(), "Q4_K");
  EXPECT_TRUE(bit_equal(lin(x), Linear(ref.narrow(0, 0, 64), at::Tensor())(x)));
}

TEST(PanelsStacked, RopeRowsRestoredToHfOrder) {
  const int64_t out = 128, in = 64, heads = 2;
  const auto q = random_tensor(GgmlType::Q8_0, out, in, 4);
  const PanelWeight w = PanelWeight::from_blocks({view(GgmlType::Q8_0, q, out, in, heads)});
  EXPECT_TRUE(bit_equal(w.dequantized(), unpermute_rope_rows(dequantize(GgmlType::Q8_0, q, out, in), heads)));
}

// The kernel is the one asked for: else the *_portable ctest entries would test AVX-512 twice
// (and SPECDEC_KERNELS=no-amx leaves the prefills to the VNNI kernel).
TEST(PanelsKernel, FollowsTheEnvironmentAndTheBuild) {
  const char* env = std::getenv("SPECDEC_KERNELS");
  bool portable = env != nullptr && std::string(env) == "portable";
  bool avx512 = false, vnni = false, avx2 = false, amx = false;
#if defined(__x86_64__) && !defined(SPECDEC_PORTABLE)
  avx512 = __builtin_cpu_supports("avx512f");
  vnni = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  avx2 = panels_detail::avx2::supported();
  amx = avx512 && vnni && panels_detail::avx512::amx_usable() && !(env && std::string(env) == "no-amx");
#else
  portable = true;
#endif
  std::printf("panel kernels: %s, int8: %s\n", panels_kernel(), panels_int8_kernel());
  EXPECT_STREQ(panels_kernel(), portable ? "portable" : avx512 ? "avx512" : avx2 ? "avx2" : "portable");
  EXPECT_STREQ(panels_int8_kernel(), portable ? "portable"
                                     : avx512 && vnni ? (amx ? "avx512-vnni+amx" : "avx512-vnni")
                                     : avx2 ? "avx2" : "portable");
}

// The two implementations of the int8 activations' quantisation give the same bits (the
// kernels then differ only in the FMA rounding described in panels.h). Values on the rounding
// boundary (k + 0.5 steps, both signs), zeros and an all-zero block are included.
TEST(PanelsKernel, Int8QuantisationIsTheSameInBothImplementations) {
#if SPECDEC_PANELS_X86
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F on this CPU";
  const int64_t n = 3, in = 256;
  std::vector<float> x(static_cast<size_t>(n * in));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& v : x) v = normal(rng);
  for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(64 + i)] = 0.0f;  // a zero block
  for (int64_t i = 0; i < 32; ++i)  // max 127: every value is exactly k + 0.5 steps or 0
    x[static_cast<size_t>(128 + i)] = i == 0 ? 127.0f : (i % 2 ? 1.0f : -1.0f) * (i % 9 + 0.5f);
  panels_detail::QuantizedRows a(x.data(), n, in), b(x.data(), n, in);
  panels_detail::avx512::quantize(x.data(), n * in / 32, a);
  panels_detail::portable::quantize(x.data(), n * in / 32, b);
  EXPECT_EQ(a.xq, b.xq);
  EXPECT_EQ(a.qsum, b.qsum);
  EXPECT_TRUE(std::memcmp(a.scale.data(), b.scale.data(), a.scale.size() * 4) == 0);
  EXPECT_TRUE(std::memcmp(a.xsum.data(), b.xsum.data(), a.xsum.size() * 4) == 0);
  EXPECT_EQ(b.xq[static_cast<size_t>(128 + 1)], 2) << "1.5 rounds away from zero";
  EXPECT_EQ(b.xq[static_cast<size_t>(128 + 2)], -3) << "-2.5 rounds away from zero";
  EXPECT_EQ(b.scale[2], 0.0f);
#else
  GTEST_SKIP() << "this build has only the portable kernels";
#endif
}

TEST(PanelsStacked, BadInputsNameTheTensor) {
  const auto q = random_tensor(GgmlType::Q8_0, 32, 64, 5);
  auto expect_error = [](const std::vector<QuantBlocks>& parts, const std::string& needle) {
    try {
      PanelWeight::from_blocks(parts);
      ADD_FAILURE() << "no error, expected one containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  QuantBlocks q2k = view(GgmlType::Q8_0, q, 32, 64);
  q2k.type = GgmlType::Q2_K;
  q2k.in = 256;
  q2k.out = 4;
  expect_error({q2k}, "Q2_K cannot be kept native");
  expect_error({view(GgmlType::Q8_0, q, 32, 64), view(GgmlType::Q8_0, q, 16, 128)}, "has 128 columns");
  expect_error({view(GgmlType::Q8_0, q, 64, 48)}, "not a multiple of the Q8_0 block size 32");
  expect_error({}, "no tensors");
}

}  // namespace

