// Linear: every kernel path against a float64 reference, and bad shapes -> specdec::Error.
#include <gtest/gtest.h>

#include <tuple>

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
#include "model/causal_lm.h"
#include "model/linear.h"

namespace sm = specdec::model;

namespace {

struct Case {
  at::Tensor x;    // [N, in] float32
  at::Tensor w;    // [out, in] float32
  at::Tensor b;    // [out] float32 or undefined
};

Case make_case(int64_t n, int64_t in, int64_t out, bool with_bias, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Case c;
  c.x = at::empty({n, in}).uniform_(-1, 1, gen);
  c.w = at::empty({out, in}).uniform_(-1, 1, gen);
  if (with_bias) c.b = at::empty({out}).uniform_(-1, 1, gen);
  return c;
}

// Worst error allowed element-wise: rel * (|x| |W|^T + |b|), i.e. relative to the sum of
// magnitudes of the terms, which bounds rounding error whatever the summation order.
at::Tensor error_budget(const Case& c, double rel) {
  at::Tensor mag = at::mm(c.x.abs().to(at::kDouble), c.w.abs().to(at::kDouble).t());
  if (c.b.defined()) mag = mag + c.b.abs().to(at::kDouble);
  return mag * rel;
}

at::Tensor reference(const Case& c) {  // float64: y = x W^T + b
  at::Tensor y = at::mm(c.x.to(at::kDouble), c.w.to(at::kDouble).t());
  if (c.b.defined()) y = y + c.b.to(at::kDouble);
  return y;
}

void expect_within(const at::Tensor& y, const Case& c, double rel, const std::string& what) {
  ASSERT_EQ(y.scalar_type(), at::kFloat) << what;
  ASSERT_EQ(y.sizes(), (at::IntArrayRef{c.x.size(0), c.w.size(0)})) << what;
  at::Tensor err = (y.to(at::kDouble) - reference(c)).abs();
  at::Tensor excess = err - error_budget(c, rel);
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": max abs err " << err.max().item<double>();
}

const int64_t kRows[] = {1, 2, 5, 8, 16, 33};
// fp32: accumulation of in=257 products in float gives ~in * 2^-24 relative worst case
// (~1.5e-5); observed errors are far smaller, 2e-5 bounds the worst case.
constexpr double kRelFp32 = 2e-5;
// bf16: x and W are each rounded to 8 significant bits (2^-9 relative each), so a product
// may be off by ~2^-8 = 3.9e-3 of its magnitude; 1e-2 leaves room for the accumulation.
constexpr double kRelBf16 = 1e-2;

}  // namespace

class LinearPaths : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(LinearPaths, Fp32PathsMatchFloat64Reference) {
  sm::set_threads(2);
  auto [n, with_bias] = GetParam();
  Case c = make_case(n, 257, 131, with_bias, 1000 + n);
  sm::Linear lin(c.w, c.b);
  std::vector<sm::LinearPath> paths = {sm::LinearPath::kAuto, sm::LinearPath::kDnnl,
                                       sm::LinearPath::kGemm};
  if (n == 1) paths.push_back(sm::LinearPath::kMv);
  if (sm::linear_has_skinny()) paths.push_back(sm::LinearPath::kSkinny);
  for (auto p : paths) {
    expect_within(lin.forward_path(c.x, p), c, kRelFp32,
                  std::string("path ") + sm::linear_path_name(p) + " n=" + std::to_string(n));
  }
  expect_within(lin(c.x), c, kRelFp32, "operator()");
}

TEST_P(LinearPaths, Bf16PathMatchesFloat64ReferenceLoosely) {
  sm::set_threads(2);
  auto [n, with_bias] = GetParam();
  Case c = make_case(n, 257, 131, with_bias, 2000 + n);
  sm::Linear lin(c.w, c.b, at::kBFloat16);
  EXPECT_EQ(lin.weight().scalar_type(), at::kBFloat16);
  expect_within(lin(c.x), c, kRelBf16, "bf16 n=" + std::to_string(n));
  expect_within(lin.forward_path(c.x, sm::LinearPath::kBf16), c, kRelBf16,
                "bf16 path n=" + std::to_string(n));
}

// The skinny kernel widens bf16 weights exactly and keeps x in fp32, so against a reference
// built from the bf16-rounded weights it is as accurate as the fp32 paths.
TEST_P(LinearPaths, SkinnyBf16IsExactOnRoundedWeights) {
  if (!sm::linear_has_skinny()) GTEST_SKIP() << "no AVX-512F on this CPU";
  sm::set_threads(2);
  auto [n, with_bias] = GetParam();
  Case c = make_case(n, 257, 131, with_bias, 3000 + n);
  sm::Linear lin(c.w, c.b, at::kBFloat16);
  Case rounded = c;
  rounded.w = c.w.to(at::kBFloat16).to(at::kFloat);
  expect_within(lin.forward_path(c.x, sm::LinearPath::kSkinny), rounded, kRelFp32,
                "skinny bf16 n=" + std::to_string(n));
}

INSTANTIATE_TEST_SUITE_P(Rows, LinearPaths,
                         ::testing::Combine(::testing::ValuesIn(kRows), ::testing::Bool()));

TEST(Linear, DispatchTableFollowsLayoutAndRowCount) {
  Case c = make_case(1, 8, 4, false, 1);
  ASSERT_EQ(sm::linear_policy(), sm::LinearPolicy::kSkinny);  // the default
  sm::Linear lin(c.w, c.b), lin16(c.w, c.b, at::kBFloat16);
  const bool sk = sm::linear_has_skinny();
  EXPECT_EQ(lin.packed(), sk);
  for (int64_t n : {1, 2, 5, 8, 9, 16, 33, 128}) {
    if (sk) {  // packed: the panel kernel for every row count
      EXPECT_EQ(lin.choose_path(n), sm::LinearPath::kSkinny) << n;
      EXPECT_EQ(lin16.choose_path(n), sm::LinearPath::kSkinny) << n;
    } else {
      EXPECT_EQ(lin.choose_path(n), n == 1   ? sm::LinearPath::kMv
                                    : n <= 8 ? sm::LinearPath::kDnnl
                                             : sm::LinearPath::kGemm)
          << n;
      EXPECT_EQ(lin16.choose_path(n), sm::LinearPath::kBf16) << n;
    }
  }
  sm::set_linear_policy(sm::LinearPolicy::kLibrary);  // applies to layers built from now on
  sm::Linear lib(c.w, c.b), lib16(c.w, c.b, at::kBFloat16);
  sm::set_linear_policy(sm::LinearPolicy::kSkinny);
  EXPECT_FALSE(lib.packed());
  EXPECT_EQ(lib.choose_path(1), sm::LinearPath::kMv);
  for (int64_t n : {2, 5, 8}) EXPECT_EQ(lib.choose_path(n), sm::LinearPath::kDnnl) << n;
  for (int64_t n : {16, 33}) EXPECT_EQ(lib.choose_path(n), sm::LinearPath::kGemm) << n;
  for (int64_t n : {1, 5, 16}) EXPECT_EQ(lib16.choose_path(n), sm::LinearPath::kBf16) << n;
  EXPECT_TRUE(at::equal(lib.weight(), lin.weight()));  // packing loses nothing
}

// The panel kernel computes each output as one chain over k whatever the number of rows:
// row r of a batch equals the same row alone, bit for bit (decode == verification), also
// across groups of 8 rows, with a bias and with an output count that is not a multiple of 32.
TEST(Linear, PanelRowsDoNotDependOnBatchSize) {
  if (!sm::linear_has_skinny()) GTEST_SKIP() << "no AVX-512F on this CPU";
  sm::set_threads(2);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    Case c = make_case(19, 300, 77, true, 6);
    sm::Linear lin(c.w, c.b, dtype);
    ASSERT_TRUE(lin.packed());
    at::Tensor all = lin(c.x);
    for (int64_t r = 0; r < 19; ++r)
      EXPECT_TRUE(at::equal(all.narrow(0, r, 1), lin(c.x.narrow(0, r, 1)))) << r;
    EXPECT_TRUE(at::equal(all.narrow(0, 3, 5), lin(c.x.narrow(0, 3, 5))));
  }
}

TEST(Linear, SizesAndBytes) {
  Case c = make_case(1, 16, 8, true, 3);
  sm::Linear f32(c.w, c.b);
  EXPECT_EQ(f32.in_features(), 16);
  EXPECT_EQ(f32.out_features(), 8);
  // Packed weights are padded to 32 outputs per panel: weight_bytes counts what is read.
  const int64_t rows = f32.packed() ? 32 : 8;
  EXPECT_EQ(f32.weight_bytes(), (16 * rows + 8) * 4);
  sm::Linear b16(c.w, at::Tensor(), at::kBFloat16);
  EXPECT_EQ(b16.weight_bytes(), 16 * rows * 2);
}

TEST(Linear, ZeroRowsGiveEmptyOutput) {
  Case c = make_case(1, 16, 8, true, 4);
  sm::Linear lin(c.w, c.b);
  at::Tensor y = lin(at::empty({0, 16}));
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{0, 8}));
}

TEST(Linear, BadShapesThrowError) {
  Case c = make_case(3, 16, 8, true, 5);
  EXPECT_THROW(sm::Linear(at::empty({16}), at::Tensor()), specdec::Error);          // 1-D weight
  EXPECT_THROW(sm::Linear(c.w, at::empty({7})), specdec::Error);                    // bias size
  EXPECT_THROW(sm::Linear(c.w, at::empty({8, 1})), specdec::Error);                 // 2-D bias
  EXPECT_THROW(sm::Linear(c.w, c.b, at::kHalf), specdec::Error);                    // dtype
  sm::Linear lin(c.w, c.b);
  EXPECT_THROW(lin(at::empty({3, 15})), specdec::Error);                            // features
  EXPECT_THROW(lin(at::empty({1, 3, 16})), specdec::Error);                         // 3-D input
  EXPECT_THROW(lin(at::empty({3, 16}, at::kDouble)), specdec::Error);               // dtype
  EXPECT_THROW(lin.forward_path(c.x, sm::LinearPath::kMv), specdec::Error);         // mv, 3 rows
  EXPECT_THROW(lin.forward_path(c.x, sm::LinearPath::kBf16), specdec::Error);       // fp32 weights
  EXPECT_THROW(sm::Linear()(c.x), specdec::Error);                                  // empty layer
  try {
    lin(at::empty({3, 15}));
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("15"), std::string::npos) << e.what();
  }
}
