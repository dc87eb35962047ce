// GPT-2 against Hugging Face transformers: the fixture (scripts/reference/make_gpt2_fixtures.py)
// holds a tiny random GPT2LMHeadModel's weights, its logits and its greedy continuation. The
// weights are written to a real model.safetensors + config.json and loaded through the HF
// directory path, so the safetensors reader, Conv1D transposes and the forward are all tested.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/gpt2.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace fs = std::filesystem;
namespace sm = specdec::model;
using nlohmann::json;

namespace {

const json& fixture() {
  static const json j = [] {
    const std::string path = source_dir() + "/tests/fixtures/model/gpt2_tiny.json";
    std::ifstream in(path);
    if (!in) throw specdec::Error("cannot open " + path);
    return json::parse(in);
  }();
  return j;
}

// Safetensors: 8-byte little-endian header length, JSON header, raw little-endian data.
void write_safetensors(const fs::path& file, const json& weights) {
  json header = json::object();
  std::string data;
  for (const auto& [name, w] : weights.items()) {
    std::vector<float> v = w["data"].get<std::vector<float>>();
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", w["shape"]}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // data section 8-byte aligned, as HF writes it
  const uint64_t n = h.size();
  std::ofstream out(file, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << h << data;
}

// A temp HF directory with the fixture's config.json and model.safetensors.
struct HfDir {
  fs::path dir;
  explicit HfDir(const json& config, const json& weights, const std::string& tag = "") {
    dir = fs::temp_directory_path() /
          ("specdec_gpt2_" + std::to_string(::getpid()) + tag);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    write_safetensors(dir / "model.safetensors", weights);
  }
  ~HfDir() { fs::remove_all(dir); }
};

std::shared_ptr<sm::CausalLM> load_fixture_model(at::ScalarType dtype = at::kFloat) {
  HfDir d(fixture()["config"], fixture()["weights"]);
  return sm::load_gpt2_hf_dir(d.dir.string(), dtype);
}

at::Tensor tokens_of(const std::vector<int64_t>& ids) {  // [1, T]
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())});
}

// Full forward of one sequence from position 0 on a fresh cache -> [T, V].
at::Tensor full_logits(sm::CausalLM& m, const std::vector<int64_t>& ids) {
  sm::KVCache cache = m.make_cache(1, m.config().n_ctx);
  return m.forward(tokens_of(ids), {0}, cache)[0];
}

class Gpt2Oracle : public ::testing::Test {
 protected:
  void SetUp() override { specdec::model::set_threads(2); }
};

}  // namespace

TEST_F(Gpt2Oracle, ConfigFromHfJson) {
  auto m = load_fixture_model();
  const sm::ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "gpt2");
  EXPECT_EQ(c.n_vocab, 64);
  EXPECT_EQ(c.n_ctx, 64);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.d_ff, 128);  // n_inner null -> 4 n_embd
  EXPECT_TRUE(c.tie_embeddings);
}

// Logits equal transformers' within 1e-4 (fp32 both sides; the fixture rounds them to 1e-6).
TEST_F(Gpt2Oracle, LogitsMatchTransformers) {
  auto m = load_fixture_model();
  const json& f = fixture();
  for (size_t s = 0; s < f["sequences"].size(); ++s) {
    auto ids = f["sequences"][s].get<std::vector<int64_t>>();
    auto ref_rows = f["logits"][s].get<std::vector<std::vector<float>>>();
    at::Tensor ref = at::empty({static_cast<int64_t>(ref_rows.size()), 64});
    for (size_t t = 0; t < ref_rows.size(); ++t)
      std::memcpy(ref[t].data_ptr<float>(), ref_rows[t].data(), 64 * sizeof(float));
    at::Tensor got = full_logits(*m, ids);
    ASSERT_EQ(got.sizes(), ref.sizes()) << "sequence " << s;
    EXPECT_LE((got - ref).abs().max().item<float>(), 1e-4f) << "sequence " << s;
    EXPECT_TRUE(at::equal(got.argmax(-1), ref.argmax(-1))) << "sequence " << s;
  }
}

// Greedy decoding with the KV cache (prefill, then one token per step) reproduces
// transformers' greedy continuation token for token.
TEST_F(Gpt2Oracle, GreedyContinuationMatchesTransformers) {
  auto m = load_fixture_model();
  const json& g = fixture()["greedy"];
  auto prompt = g["prompt"].get<std::vector<int64_t>>();
  auto expected = g["tokens"].get<std::vector<int64_t>>();
  sm::KVCache cache = m->make_cache(1, 64);
  at::Tensor logits = m->forward(tokens_of(prompt), {0}, cache);
  std::vector<int64_t> out;
  for (size_t i = 0; i < expected.size(); ++i) {
    out.push_back(logits[0][-1].argmax().item<int64_t>());
    logits = m->forward(tokens_of({out.back()}), {cache.length(0)}, cache);
  }
  EXPECT_EQ(out, expected);
}

// Incremental decoding through the cache (chunks of 1, 3 and 5 tokens, including a rollback
// that rewrites positions) gives the logits of one full forward.
TEST_F(Gpt2Oracle, KvCacheDecodeEqualsFullForward) {
  auto m = load_fixture_model();
  auto ids = fixture()["sequences"][2].get<std::vector<int64_t>>();  // 23 tokens
  at::Tensor full = full_logits(*m, ids);
  sm::KVCache cache = m->make_cache(1, 64);
  std::vector<at::Tensor> rows;
  int64_t pos = 0;
  for (int64_t chunk : {5, 1, 1, 3, 1, 5, 7}) {
    std::vector<int64_t> part(ids.begin() + pos, ids.begin() + pos + chunk);
    rows.push_back(m->forward(tokens_of(part), {pos}, cache)[0]);
    pos += chunk;
    EXPECT_EQ(cache.length(0), pos);
  }
  at::Tensor inc = at::cat(rows, 0);
  EXPECT_LE((inc - full).abs().max().item<float>(), 1e-5f);

  // Roll back 4 positions after writing junk there, then redo them: same logits again.
  std::vector<int64_t> junk = {1, 2, 3, 4};
  cache.truncate(0, 19);
  m->forward(tokens_of(junk), {19}, cache);
  cache.truncate(0, 19);
  at::Tensor redo = m->forward(tokens_of({ids.begin() + 19, ids.end()}), {19}, cache)[0];
  EXPECT_LE((redo - full.narrow(0, 19, 4)).abs().max().item<float>(), 1e-5f);
}

// Two sequences at different positions in one batched call: each row equals its own
// single-sequence forward (the causal mask is per sequence).
TEST_F(Gpt2Oracle, BatchWithDifferentStartsMatchesSingle) {
  auto m = load_fixture_model();
  auto a = fixture()["sequences"][1].get<std::vector<int64_t>>();  // 7 tokens
  auto b = fixture()["sequences"][2].get<std::vector<int64_t>>();
  sm::KVCache cache = m->make_cache(2, 64);
  std::vector<int64_t> prefill;
  for (int i = 0; i < 5; ++i) prefill.push_back(a[i]);
  for (int i = 0; i < 5; ++i) prefill.push_back(b[i]);
  m->forward(at::tensor(prefill, at::kLong).view({2, 5}), {0, 0}, cache);
  cache.truncate(0, 3);  // sequence 0 continues at position 3, sequence 1 at 5
  at::Tensor next = at::tensor(std::vector<int64_t>{a[3], a[4], b[5], b[6]}, at::kLong).view({2, 2});
  at::Tensor got = m->forward(next, {3, 5}, cache);  // [2, 2, V]
  at::Tensor ref_a = full_logits(*m, {a.begin(), a.begin() + 5}).narrow(0, 3, 2);
  at::Tensor ref_b = full_logits(*m, {b.begin(), b.begin() + 7}).narrow(0, 5, 2);
  EXPECT_LE((got[0] - ref_a).abs().max().item<float>(), 1e-5f);
  EXPECT_LE((got[1] - ref_b).abs().max().item<float>(), 1e-5f);
  EXPECT_EQ(cache.length(0), 5);
  EXPECT_EQ(cache.length(1), 7);
}

// bf16 linear weights change logits in the 3rd significant digit; 0.05 absolute on logits of
// magnitude ~5 is the stated bound.
TEST_F(Gpt2Oracle, Bf16WeightsStayCloseToFp32) {
  auto m32 = load_fixture_model(at::kFloat);
  auto m16 = load_fixture_model(at::kBFloat16);
  auto ids = fixture()["sequences"][2].get<std::vector<int64_t>>();
  at::Tensor a = full_logits(*m32, ids), b = full_logits(*m16, ids);
  EXPECT_LE((a - b).abs().max().item<float>(), 0.05f);
  EXPECT_LT(m16->weight_bytes(), m32->weight_bytes());
}

TEST_F(Gpt2Oracle, BadInputThrowsError) {
  auto m = load_fixture_model();
  sm::KVCache cache = m->make_cache(1, 128);
  EXPECT_THROW(m->forward(tokens_of({64}), {0}, cache), specdec::Error);       // token id
  EXPECT_THROW(m->forward(tokens_of({1}), {1}, cache), specdec::Error);        // beyond length
  std::vector<int64_t> long_seq(65, 1);
  EXPECT_THROW(m->forward(tokens_of(long_seq), {0}, cache), specdec::Error);   // > n_ctx 64
  sm::KVCache wrong = sm::KVCache(2, 1, 4, 64, 4);
  EXPECT_THROW(m->forward(tokens_of({1}), {0}, wrong), specdec::Error);        // head_dim
}

TEST(Gpt2Load, BadDirectoriesThrowErrorNamingTheProblem) {
  json cfg = fixture()["config"];
  json weights = fixture()["weights"];
  auto expect_error = [](const HfDir& d, const std::string& needle) {
    try {
      sm::load_gpt2_hf_dir(d.dir.string());
      ADD_FAILURE() << "no error for " << needle;
    } catch (const specdec::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json llama = cfg;
  llama["model_type"] = "llama";
  expect_error(HfDir(llama, weights, "a"), "model_type");
  json relu = cfg;
  relu["activation_function"] = "relu";
  expect_error(HfDir(relu, weights, "b"), "activation_function");
  json missing = weights;
  missing.erase("transformer.h.1.mlp.c_fc.bias");
  expect_error(HfDir(cfg, missing, "c"), "transformer.h.1.mlp.c_fc.bias");
  json bad_shape = weights;
  bad_shape["transformer.h.0.attn.c_attn.weight"]["shape"] = {96, 32};  // not transposed
  expect_error(HfDir(cfg, bad_shape, "d"), "h.0.w_qkv");
}

TEST(TinyGpt2, DeterministicPerSeedAndShaped) {
  auto m0 = sm::make_tiny_gpt2(sm::tiny_gpt2_config(), 0);
  auto m0b = sm::make_tiny_gpt2(sm::tiny_gpt2_config(), 0);
  auto m1 = sm::make_tiny_gpt2(sm::tiny_gpt2_config(), 1);
  std::vector<int64_t> ids = {1, 2, 3, 4, 5};
  at::Tensor a = full_logits(*m0, ids), b = full_logits(*m0b, ids), c = full_logits(*m1, ids);
  EXPECT_EQ(a.sizes(), (at::IntArrayRef{5, 64}));
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::allclose(a, c));
  EXPECT_GT(m0->weight_bytes(), 0);
  sm::ModelConfig bad = sm::tiny_gpt2_config();
  bad.n_kv_heads = 2;
  EXPECT_THROW(sm::make_tiny_gpt2(bad, 0), specdec::Error);
}

// A token tree in one forward (causal_lm.h ForwardOptions::parents): every node's logits equal
// its root-to-node path fed as a chain. GPT-2 masks with matmul + softmax over all keys, so
// the rows agree to rounding, not bit for bit as in the Llama kernels.
TEST(TinyGpt2, RefusesRaggedFedCounts) {  // ForwardOptions::n_fed is the packed llama engine's
  auto m = sm::make_tiny_gpt2(sm::tiny_gpt2_config(), 3);
  sm::KVCache cache = m->make_cache(2, 8);
  sm::ForwardOptions opt;
  opt.n_fed = {0, 2};
  try {
    m->forward(at::zeros({2, 2}, at::kLong), {0, 0}, cache, opt);
    FAIL() << "expected an error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2 forward: ragged batches (ForwardOptions::n_fed[0] = 0 < T = 2)"),
              std::string::npos) << e.what();
  }
}

TEST(TinyGpt2, TreeForwardEqualsEachPathAsAChain) {
  auto m = sm::make_tiny_gpt2(sm::tiny_gpt2_config(), 3);
  const std::vector<int64_t> prompt = {1, 5, 9, 2};
  const std::vector<int64_t> tokens = {4, 7, 7, 3, 8, 1};
  const std::vector<int32_t> parents = {-1, 0, -1, 1, 1, 2};
  auto ids = [](const std::vector<int64_t>& v) { return at::tensor(at::IntArrayRef(v), at::kLong).view({1, -1}); };
  const int64_t P = static_cast<int64_t>(prompt.size());
  sm::KVCache cache = m->make_cache(1, 16);
  m->forward(ids(prompt), {0}, cache);
  sm::ForwardOptions opt;
  opt.parents = parents;
  const at::Tensor tree = m->forward(ids(tokens), {P}, cache, opt).logits[0];  // [6, V]
  for (int64_t node = 0; node < 6; ++node) {
    std::vector<int64_t> path;
    for (int64_t a = node; a >= 0; a = parents[a]) path.insert(path.begin(), tokens[a]);
    sm::KVCache c = m->make_cache(1, 16);
    m->forward(ids(prompt), {0}, c);
    const at::Tensor chain = m->forward(ids(path), {P}, c)[0];
    EXPECT_LT((tree[node] - chain[static_cast<int64_t>(path.size()) - 1]).abs().max().item<float>(), 1e-5f) << node;
  }
  opt.positions = {0, 1, 2, 3, 4, 5000};  // beyond the learned position table
  EXPECT_THROW(m->forward(ids(tokens), {P}, cache, opt), specdec::Error);
}
