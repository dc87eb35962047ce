// The real SmolLM2-135M-Instruct GGUF: header facts, tokenizer metadata, every tensor
// dequantises to finite values, and five tensors (Q8_0, Q4_1, F32) match values produced
// independently by the python `gguf` package (scripts/reference/make_io_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "io/gguf.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using specdec::io::GgufFile;

namespace {

const std::string k_model = source_dir() + "/models/smollm2-135m-instruct.gguf";

std::shared_ptr<GgufFile> open_model() {
  struct stat st {};
  if (::stat(k_model.c_str(), &st) != 0) {
    ADD_FAILURE() << "missing " << k_model << ": run scripts/fetch_models.sh smollm2-135m";
    return nullptr;
  }
  return GgufFile::open(k_model);
}

}  // namespace

TEST(IoGgufSmollm2, HeaderAndTokenizerMetadata) {
  auto f = open_model();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->tensors().size(), 272u);  // 30 layers x 9 + token_embd + output_norm
  EXPECT_EQ(f->get_int("llama.block_count"), 30);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "smollm");
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(tokens[0], "<|endoftext|>");
  EXPECT_EQ(tokens[1], "<|im_start|>");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 2);
  const auto* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape(), (std::vector<int64_t>{49152, 576}));
  const std::string s = f->summary();
  EXPECT_NE(s.find("Q4_1=210"), std::string::npos) << s;
  EXPECT_NE(s.find("vocab size: 49152"), std::string::npos) << s;
}

TEST(IoGgufSmollm2, EveryTensorDequantisesToFiniteValues) {
  auto f = open_model();
  ASSERT_TRUE(f);
  std::vector<float> buf;
  int64_t n_total = 0;
  for (const auto& t : f->tensors()) {
    buf.resize(static_cast<size_t>(t.n_elements()));
    f->read_f32(t, buf.data());
    int64_t n_bad = 0;
    for (float v : buf) n_bad += !std::isfinite(v);
    EXPECT_EQ(n_bad, 0) << t.name;
    n_total += t.n_elements();
  }
  EXPECT_GT(n_total, 130'000'000);  // ~135M parameters (embedding tied to the output)
}

TEST(IoGgufSmollm2, MatchesPythonGgufDequantize) {
  auto f = open_model();
  ASSERT_TRUE(f);
  std::ifstream in(source_dir() + "/tests/fixtures/io/smollm2_tensors.json");
  ASSERT_TRUE(in) << "missing tests/fixtures/io/smollm2_tensors.json: run scripts/reference/make_io_fixtures.py";
  const auto doc = nlohmann::json::parse(in);
  ASSERT_GE(doc["tensors"].size(), 5u);
  for (const auto& ref : doc["tensors"]) {
    const std::string name = ref["name"];
    SCOPED_TRACE(name);
    const auto* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(specdec::io::ggml_type_name(t->type), ref["type"].get<std::string>());
    EXPECT_EQ(t->ne, ref["ne"].get<std::vector<int64_t>>());
    std::vector<float> y(static_cast<size_t>(t->n_elements()));
    f->read_f32(*t, y.data());
    // Tolerance 1e-6 relative: both sides compute d * q (+ m) in fp32, so values agree
    // to the last bit unless the compiler contracts into an FMA.
    const auto first = ref["first32"].get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_NEAR(y[i], first[i], 1e-6 * std::abs(first[i]) + 1e-12) << "element " << i;
    const auto last = ref["last8"].get<std::vector<double>>();
    for (size_t i = 0; i < last.size(); ++i) {
      const size_t at = y.size() - last.size() + i;
      EXPECT_NEAR(y[at], last[i], 1e-6 * std::abs(last[i]) + 1e-12) << "element " << at;
    }
    double sum = 0, sum_abs = 0;
    for (float v : y) {
      sum += v;
      sum_abs += std::abs(v);
    }
    // Relative to sum |x| since the signed sum may be near zero.
    EXPECT_NEAR(sum, ref["sum"].get<double>(), 1e-6 * ref["sum_abs"].get<double>());
    EXPECT_NEAR(sum_abs, ref["sum_abs"].get<double>(), 1e-6 * ref["sum_abs"].get<double>());
  }
}
