#pragma once
// Benchmark support: the ATen engine with random weights of a real model's shape, generated on
// the device (no model file needed on a GPU machine), and the flags of the benchmarks using it.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/llama_aten.h"

namespace specdec::bench {

struct Shape {
  int64_t vocab, d, layers, heads, kv_heads, ff;
  double rope_theta;
};

inline const std::map<std::string, Shape>& shapes() {
  static const std::map<std::string, Shape> s = {
      {"smollm2", {49152, 576, 30, 9, 3, 1536, 1e5}},           // SmolLM2-135M
      {"qwen2.5-1.5b", {151936, 1536, 28, 12, 2, 8960, 1e6}},  // Qwen2.5(-Coder)-1.5B
      {"tiny", {512, 64, 2, 4, 2, 128, 1e4}},                  // a smoke test anywhere
  };
  return s;
}

inline std::shared_ptr<model::CausalLM> random_model(const Shape& s, at::ScalarType dtype, at::Device device, bool graphs) {
  model::ModelConfig c;
  c.arch = "llama";
  c.n_vocab = s.vocab;
  c.n_ctx = 4096;
  c.d_model = s.d;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.d / s.heads;
  c.d_ff = s.ff;
  c.rope_theta = s.rope_theta;
  c.norm_eps = 1e-6;
  at::manual_seed(1);
  const auto w = [&](int64_t rows, int64_t cols) {
    return at::randn({rows, cols}, at::TensorOptions().device(device).dtype(dtype)).mul_(0.02);
  };
  const auto ones = [&](int64_t n) { return at::ones({n}, at::TensorOptions().device(device)); };
  model::LlamaTensors t;
  t.tok_embd = at::randn({s.vocab, s.d}, at::TensorOptions().device(device)).mul_(0.02);
  const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  for (int64_t l = 0; l < s.layers; ++l) {
    model::LlamaLayerTensors L;
    L.attn_norm = ones(s.d);
    L.ffn_norm = ones(s.d);
    L.wq = w(q, s.d);
    L.wk = w(kv, s.d);
    L.wv = w(kv, s.d);
    L.wo = w(s.d, q);
    L.w_gate = w(s.ff, s.d);
    L.w_up = w(s.ff, s.d);
    L.w_down = w(s.d, s.ff);
    t.layers.push_back(std::move(L));
  }
  t.out_norm = ones(s.d);  // tied head: the embedding
  return model::make_llama_aten(c, std::move(t), dtype, device, graphs);
}

inline std::string shape_names() {
  std::string out;
  for (const auto& [name, shape] : shapes()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Takes this program's own --key=value flags (keys: where each value goes) out of argv, then
// hands the rest to Google Benchmark. Returns false when Google Benchmark finds one it does not
// know (it has said which).
inline bool parse_flags(int argc, char** argv, const std::map<std::string, std::string*>& keys) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool mine = false;
    for (const auto& [key, out] : keys) {
      const std::string k = "--" + key + "=";
      if (a.rfind(k, 0) == 0) {
        *out = a.substr(k.size());
        mine = true;
      }
    }
    if (!mine) rest.push_back(argv[i]);
  }
  int n_rest = static_cast<int>(rest.size());
  benchmark::Initialize(&n_rest, rest.data());
  return !benchmark::ReportUnrecognizedArguments(n_rest, rest.data());
}

// The non-empty items of a `sep`-separated list.
inline std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = std::min(s.find(sep, a), s.size());
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

}  // namespace specdec::bench
