// The loader on files written here: an HF directory (config.json + model.safetensors) of a
// tiny Llama/Qwen2 must give exactly the model built from the same tensors in memory, and
// broken directories must fail naming the file and tensor. Also dtype parsing and
// "tiny-llama" through model::load().
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel.h"
#include "model/loader.h"
#include "model/tiny.h"

using namespace specdec;
using namespace specdec::model;
namespace fs = std::filesystem;

namespace {

// Writes fp32 tensors as a safetensors file (8-byte little-endian header length, JSON
// header with dtype/shape/data_offsets, then the raw data).
void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& ts) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : ts) {
    at::Tensor c = t.to(at::kFloat).contiguous();
    const size_t begin = data.size(), n = c.numel() * sizeof(float);
    data.append(reinterpret_cast<const char*>(c.data_ptr<float>()), n);
    header[name] = {{"dtype", "F32"}, {"shape", c.sizes().vec()}, {"data_offsets", {begin, begin + n}}};
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  uint64_t len = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << data;
}

std::map<std::string, at::Tensor> hf_names(const LlamaTensors& w, bool bias) {
  std::map<std::string, at::Tensor> m;
  m["model.embed_tokens.weight"] = w.tok_embd;
  m["model.norm.weight"] = w.out_norm;
  if (w.output.defined()) m["lm_head.weight"] = w.output;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& L = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m[p + "input_layernorm.weight"] = L.attn_norm;
    m[p + "post_attention_layernorm.weight"] = L.ffn_norm;
    m[p + "self_attn.q_proj.weight"] = L.wq;
    m[p + "self_attn.k_proj.weight"] = L.wk;
    m[p + "self_attn.v_proj.weight"] = L.wv;
    m[p + "self_attn.o_proj.weight"] = L.wo;
    m[p + "mlp.gate_proj.weight"] = L.w_gate;
    m[p + "mlp.up_proj.weight"] = L.w_up;
    m[p + "mlp.down_proj.weight"] = L.w_down;
    if (bias) {
      m[p + "self_attn.q_proj.bias"] = L.bq;
      m[p + "self_attn.k_proj.bias"] = L.bk;
      m[p + "self_attn.v_proj.bias"] = L.bv;
    }
  }
  return m;
}

nlohmann::json hf_config(const ModelConfig& c) {
  return {{"model_type", c.arch}, {"vocab_size", c.n_vocab}, {"hidden_size", c.d_model},
          {"intermediate_size", c.d_ff}, {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.n_kv_heads},
          {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta},
          {"max_position_embeddings", c.n_ctx}, {"tie_word_embeddings", false}};
}

std::string temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("specdec_test_model_loader_" + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

void write_dir(const std::string& dir, const nlohmann::json& cfg,
               const std::map<std::string, at::Tensor>& ts) {
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  write_safetensors(dir + "/model.safetensors", ts);
}

}  // namespace

TEST(ModelLoader, HfDirectoryGivesTheSameModelAsInMemoryTensors) {
  for (bool qwen : {false, true}) {
    ModelConfig c = tiny_llama_config();
    if (qwen) {
      c.arch = "qwen2";
      c.qkv_bias = true;
      c.rope_theta = 1e6;
    }
    LlamaTensors w = make_tiny_llama_tensors(c, 21);
    const std::string dir = temp_dir(c.arch);
    write_dir(dir, hf_config(c), hf_names(w, qwen));
    auto loaded = load_llama_hf_dir(dir);
    auto direct = make_llama(c, w);
    EXPECT_EQ(loaded->config().arch, c.arch);
    EXPECT_EQ(loaded->config().qkv_bias, qwen);
    EXPECT_FALSE(loaded->config().tie_embeddings);
    at::Tensor tokens = at::arange(12, at::kLong).remainder(c.n_vocab).view({1, 12});
    KVCache a = loaded->make_cache(1, 12), b = direct->make_cache(1, 12);
    EXPECT_TRUE(loaded->forward(tokens, {0}, a).equal(direct->forward(tokens, {0}, b))) << c.arch;
    fs::remove_all(dir);
  }
}

TEST(ModelLoader, HfDirectoryErrorsNameTheTensor) {
  ModelConfig c = tiny_llama_config();
  LlamaTensors w = make_tiny_llama_tensors(c, 1);
  const std::string dir = temp_dir("errors");
  auto expect_error = [&](const std::string& needle) {
    try {
      load_llama_hf_dir(dir);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto ts = hf_names(w, false);
  ts.erase("model.layers.1.mlp.up_proj.weight");
  write_dir(dir, hf_config(c), ts);
  expect_error("model.layers.1.mlp.up_proj.weight");
  ts = hf_names(w, false);
  ts["model.layers.0.self_attn.k_proj.weight"] = at::zeros({32, 32});
  write_dir(dir, hf_config(c), ts);
  expect_error("expected [16, 32]");
  nlohmann::json cfg = hf_config(c);
  cfg["model_type"] = "mamba";
  write_dir(dir, cfg, hf_names(w, false));
  expect_error("mamba");
  cfg = hf_config(c);
  cfg.erase("hidden_size");
  write_dir(dir, cfg, hf_names(w, false));
  expect_error("hidden_size");
  fs::remove_all(dir);
}

TEST(ModelLoader, TiedHeadWhenLmHeadIsAbsent) {
  ModelConfig c = tiny_llama_config();
  LlamaTensors w = make_tiny_llama_tensors(c, 2);
  w.output = at::Tensor();
  const std::string dir = temp_dir("tied");
  write_dir(dir, hf_config(c), hf_names(w, false));
  auto m = load_llama_hf_dir(dir);
  EXPECT_TRUE(m->config().tie_embeddings);
  fs::remove_all(dir);
}

TEST(ModelLoader, Llama3RopeScalingFromConfig) {
  ModelConfig c = tiny_llama_config();
  LlamaTensors w = make_tiny_llama_tensors(c, 3);
  nlohmann::json cfg = hf_config(c);
  cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  const std::string dir = temp_dir("llama3");
  write_dir(dir, cfg, hf_names(w, false));
  auto m = load_llama_hf_dir(dir);
  EXPECT_EQ(m->config().rope_scaling_type, "llama3");
  EXPECT_DOUBLE_EQ(m->config().rope_scaling_factor, 8.0);
  EXPECT_EQ(m->config().rope_orig_ctx, 64);
  cfg["rope_scaling"]["rope_type"] = "yarn";
  write_dir(dir, cfg, hf_names(w, false));
  EXPECT_THROW(load_llama_hf_dir(dir), Error);
  fs::remove_all(dir);
}

TEST(ModelLoader, LoadTinyAndBadSpecs) {
  ModelSpec spec;
  spec.path = "tiny-llama";
  spec.seed = 5;
  spec.threads = 1;
  LoadedModel m = load(spec);
  ASSERT_TRUE(m.model);
  EXPECT_EQ(m.model->config().n_vocab, 32);
  EXPECT_EQ(specdec::parallel::num_threads(), 1);
  EXPECT_EQ(at::get_num_threads(), 1);  // LibTorch stays single-threaded: the pool does the work
  EXPECT_EQ(parse_dtype("bfloat16"), at::kBFloat16);
  EXPECT_EQ(parse_dtype("float32"), at::kFloat);
  EXPECT_THROW(parse_dtype("int4"), Error);
  spec.path = "/nonexistent/model.gguf";
  EXPECT_THROW(load(spec), Error);
  spec.path = "tiny-llama";
  spec.threads = -1;
  EXPECT_THROW(load(spec), Error);
}
