// GPT-2 forward pass (see gpt2.h). Attention is matmul + softmax over the preallocated KV
// cache (LibTorch 1.13 has no public scaled_dot_product_attention); every projection goes
// through Linear, so the row-count dispatch serves decode, verification and prefill alike.
#include "model/gpt2.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json_limits.h"
#include "io/safetensors.h"
#include "model/linear.h"
#include "model/checks.h"
#include "model/config_limits.h"

namespace specdec::model {

namespace {

void expect_shape(const at::Tensor& t, const std::string& name, std::vector<int64_t> shape) {
  SD_CHECK(t.defined(), "gpt2: tensor ", name, " is missing, expected shape ", shape_str(shape));
  SD_CHECK(t.sizes() == at::IntArrayRef(shape), "gpt2: tensor ", name, ": shape ",
           shape_str(t.sizes()), ", expected ", shape_str(shape));
}

void check_config(const ModelConfig& c) {
  check_config_limits(c, "gpt2 config");
  SD_CHECK(c.n_vocab > 0 && c.n_ctx > 0 && c.d_model > 0 && c.n_layers > 0 && c.n_heads > 0 &&
               c.d_ff > 0,
           "gpt2: config has a non-positive size (n_vocab=", c.n_vocab, " n_ctx=", c.n_ctx,
           " d_model=", c.d_model, " n_layers=", c.n_layers, " n_heads=", c.n_heads,
           " d_ff=", c.d_ff, ")");
  SD_CHECK(c.head_dim * c.n_heads == c.d_model, "gpt2: head_dim ", c.head_dim, " x n_heads ",
           c.n_heads, " != d_model ", c.d_model);
  SD_CHECK(c.n_kv_heads == c.n_heads, "gpt2: n_kv_heads ", c.n_kv_heads,
           " must equal n_heads ", c.n_heads, " (GPT-2 has no grouped-query attention)");
}

void check_tensors(const ModelConfig& c, const Gpt2Tensors& t) {
  const int64_t d = c.d_model;
  expect_shape(t.wte, "wte", {c.n_vocab, d});
  expect_shape(t.wpe, "wpe", {c.n_ctx, d});
  expect_shape(t.lnf_w, "ln_f.weight", {d});
  expect_shape(t.lnf_b, "ln_f.bias", {d});
  if (t.lm_head.defined()) expect_shape(t.lm_head, "lm_head", {c.n_vocab, d});
  SD_CHECK(static_cast<int64_t>(t.layers.size()) == c.n_layers, "gpt2: got ", t.layers.size(),
           " layers, config says n_layers = ", c.n_layers);
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const auto& L = t.layers[i];
    const std::string p = "h." + std::to_string(i) + ".";
    for (auto [w, n] : {std::pair{&L.ln1_w, "ln_1.weight"}, {&L.ln1_b, "ln_1.bias"},
                        {&L.ln2_w, "ln_2.weight"}, {&L.ln2_b, "ln_2.bias"}, {&L.b_o, "b_o"},
                        {&L.b_proj, "b_proj"}})
      expect_shape(*w, p + n, {d});
    expect_shape(L.w_qkv, p + "w_qkv", {3 * d, d});
    expect_shape(L.b_qkv, p + "b_qkv", {3 * d});
    expect_shape(L.w_o, p + "w_o", {d, d});
    expect_shape(L.w_fc, p + "w_fc", {c.d_ff, d});
    expect_shape(L.b_fc, p + "b_fc", {c.d_ff});
    expect_shape(L.w_proj, p + "w_proj", {d, c.d_ff});
  }
}

at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

struct Block {
  at::Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [d]
  Linear qkv, o, fc, proj;
};

class Gpt2Model final : public CausalLM {
 public:
  Gpt2Model(const ModelConfig& cfg, Gpt2Tensors t, at::ScalarType dtype) : cfg_(cfg) {
    wte_ = f32(t.wte);
    wpe_ = f32(t.wpe);
    for (auto& L : t.layers) {
      Block b{f32(L.ln1_w), f32(L.ln1_b), f32(L.ln2_w), f32(L.ln2_b),
              Linear(f32(L.w_qkv), f32(L.b_qkv), dtype), Linear(f32(L.w_o), f32(L.b_o), dtype),
              Linear(f32(L.w_fc), f32(L.b_fc), dtype),
              Linear(f32(L.w_proj), f32(L.b_proj), dtype)};
      L = Gpt2LayerTensors();  // drop the caller's copies as we go
      blocks_.push_back(std::move(b));
    }
    lnf_w_ = f32(t.lnf_w);
    lnf_b_ = f32(t.lnf_b);
    cfg_.tie_embeddings = !t.lm_head.defined();
    head_ = Linear(cfg_.tie_embeddings ? wte_ : f32(t.lm_head), at::Tensor(), dtype);
  }

  const ModelConfig& config() const override { return cfg_; }

  KVCache make_cache(int64_t batch, int64_t max_seq) const override {
    return KVCache(cfg_.n_layers, batch, cfg_.n_heads, max_seq, cfg_.head_dim);
  }

  int64_t weight_bytes() const override {
    int64_t n = head_.weight_bytes() + (lnf_w_.numel() + lnf_b_.numel()) * 4;
    for (const auto& b : blocks_) {
      for (const Linear* l : {&b.qkv, &b.o, &b.fc, &b.proj}) n += l->weight_bytes();
      n += 4 * cfg_.d_model * 4;  // the two LayerNorms
    }
    return n + 2 * cfg_.d_model * 4;  // one token and one position embedding row per token
  }

  int64_t resident_weight_bytes() const override {  // the head keeps its own (packed) copy of wte
    return weight_bytes() - 2 * cfg_.d_model * 4 + (wte_.numel() + wpe_.numel()) * 4;
  }

  using CausalLM::forward;
  ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                        KVCache& cache, const ForwardOptions& options) override;

 private:
  at::Tensor causal_mask(const std::vector<int64_t>& start, int64_t T, int64_t n_keys) const;
  at::Tensor tree_mask(const std::vector<int64_t>& start, const ForwardOptions& opt, int64_t T,
                       int64_t n_keys) const;
  // x: [B*T, d] -> [B*T, d]
  at::Tensor attention(const Block& blk, int64_t layer, const at::Tensor& x,
                       const std::vector<int64_t>& start, int64_t B, int64_t T,
                       const at::Tensor& mask, KVCache& cache) const;

  ModelConfig cfg_;
  at::Tensor wte_, wpe_;        // [V, d], [n_ctx, d]
  std::vector<Block> blocks_;
  at::Tensor lnf_w_, lnf_b_;    // [d]
  Linear head_;                 // [V, d]
};

// [B, 1, T, n_keys] bool, true where key j lies after query t's position start[b] + t (or is
// undefined when nothing is masked: one sequence decoding one token attends to all keys).
at::Tensor Gpt2Model::causal_mask(const std::vector<int64_t>& start, int64_t T,
                                  int64_t n_keys) const {
  const int64_t B = static_cast<int64_t>(start.size());
  if (B == 1 && T == 1) return at::Tensor();
  at::Tensor q_pos = at::tensor(start, at::kLong).view({B, 1, 1, 1}) +
                     at::arange(T, at::kLong).view({1, 1, T, 1});
  at::Tensor k_pos = at::arange(n_keys, at::kLong).view({1, 1, 1, n_keys});
  return k_pos > q_pos;
}

// [B, 1, T, n_keys] bool, true where fed token t (tree node tree_cached + t) must not see key j:
// the prefix [0, start[b] - tree_cached) is visible, and of the tree only t's ancestors.
at::Tensor Gpt2Model::tree_mask(const std::vector<int64_t>& start, const ForwardOptions& opt, int64_t T,
                                int64_t n_keys) const {
  const int64_t B = static_cast<int64_t>(start.size()), c = opt.tree_cached;
  std::vector<int64_t> anc, begin;
  tree_ancestors(opt.parents, anc, begin);
  at::Tensor mask = at::ones({B, 1, T, n_keys}, at::kBool);
  bool* m = mask.data_ptr<bool>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      bool* row = m + (b * T + t) * n_keys;
      const int64_t base = start[b] - c;
      std::fill(row, row + base, false);
      for (int64_t a = begin[c + t]; a < begin[c + t + 1]; ++a) row[base + anc[a]] = false;
    }
  return mask;
}

at::Tensor Gpt2Model::attention(const Block& blk, int64_t layer, const at::Tensor& x,
                                const std::vector<int64_t>& start, int64_t B, int64_t T,
                                const at::Tensor& mask, KVCache& cache) const {
  const int64_t H = cfg_.n_heads, hd = cfg_.head_dim;
  // [B*T, 3d] -> [3, B, H, T, hd]: HF splits the fused output as q | k | v, each by head.
  at::Tensor qkv = blk.qkv(x).view({B, T, 3, H, hd}).permute({2, 0, 3, 1, 4});
  at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];  // [B, H, T, hd]
  at::Tensor& kc = cache.k(layer);                // [B, H, max_seq, hd]
  at::Tensor& vc = cache.v(layer);
  for (int64_t b = 0; b < B; ++b) {
    kc[b].narrow(1, start[b], T).copy_(k[b]);
    vc[b].narrow(1, start[b], T).copy_(v[b]);
  }
  const int64_t n_keys = *std::max_element(start.begin(), start.end()) + T;
  at::Tensor keys = kc.narrow(2, 0, n_keys), vals = vc.narrow(2, 0, n_keys);  // [B, H, L, hd]
  at::Tensor scores = at::matmul(q, keys.transpose(2, 3)).mul_(1.0 / std::sqrt(double(hd)));
  if (mask.defined()) scores.masked_fill_(mask, -std::numeric_limits<float>::infinity());
  at::Tensor out = at::matmul(at::softmax(scores, -1), vals);  // [B, H, T, hd]
  return blk.o(out.permute({0, 2, 1, 3}).reshape({B * T, cfg_.d_model}));
}

ForwardResult Gpt2Model::forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos,
                                 KVCache& cache, const ForwardOptions& options) {
  ForwardOptions copy;  // a tree grown on a device comes to the host here
  const ForwardOptions& opt = read_device_parents(options, copy);
  check_forward_inputs("gpt2 forward", cfg_, cfg_.n_heads, cfg_.n_ctx, tokens, start_pos, cache, opt.n_fed);
  refuse_ragged("gpt2 forward", tokens, opt);
  check_forward_options("gpt2 forward", cfg_, tokens, start_pos, opt);
  const int64_t B = tokens.size(0), T = tokens.size(1), d = cfg_.d_model;
  at::Tensor ids = tokens.to(at::kLong).reshape({B * T});
  const std::vector<int64_t> positions = fed_positions(start_pos, T, opt);
  for (size_t i = 0; i < positions.size(); ++i)
    SD_CHECK(positions[i] < cfg_.n_ctx, "gpt2 forward: position ", positions[i], " of fed token ", i,
             " is beyond the learned position table n_ctx = ", cfg_.n_ctx);
  at::Tensor pos = at::tensor(positions, at::kLong);  // [B*T]
  at::Tensor x = wte_.index_select(0, ids) + wpe_.index_select(0, pos);  // [B*T, d]
  const int64_t n_keys = *std::max_element(start_pos.begin(), start_pos.end()) + T;
  at::Tensor mask = opt.parents.empty() ? causal_mask(start_pos, T, n_keys) : tree_mask(start_pos, opt, T, n_keys);
  ForwardResult res;
  size_t next_listed = 0;  // opt.layers is ascending: walk it alongside l
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const bool run = opt.layers.empty() || (next_listed < opt.layers.size() && opt.layers[next_listed] == l);
    if (run) {
      if (!opt.layers.empty()) ++next_listed;
      const Block& blk = blocks_[l];
      at::Tensor h = at::layer_norm(x, {d}, blk.ln1_w, blk.ln1_b, cfg_.norm_eps);
      x = x + attention(blk, l, h, start_pos, B, T, mask, cache);
      h = at::layer_norm(x, {d}, blk.ln2_w, blk.ln2_b, cfg_.norm_eps);
      x = x + blk.proj(at::gelu(blk.fc(h), "tanh"));  // GPT-2's gelu_new is the tanh form
    }
    if (l == opt.hidden_layer) res.layer_hidden = x.clone().view({B, T, d});
  }
  x = at::layer_norm(x, {d}, lnf_w_, lnf_b_, cfg_.norm_eps);
  for (int64_t b = 0; b < B; ++b) cache.set_length(b, start_pos[b] + T);
  if (opt.final_hidden) res.hidden = x.view({B, T, d});
  if (opt.logits) res.logits = head_(x).view({B, T, cfg_.n_vocab});
  return res;
}

}  // namespace

std::shared_ptr<CausalLM> make_gpt2(const ModelConfig& cfg, Gpt2Tensors tensors,
                                    at::ScalarType dtype) {
  SD_CHECK(cfg.arch == "gpt2", "make_gpt2: config arch is '", cfg.arch, "', expected 'gpt2'");
  check_config(cfg);
  check_tensors(cfg, tensors);
  return std::make_shared<Gpt2Model>(cfg, std::move(tensors), dtype);
}

// ---- Hugging Face directory ----------------------------------------------------------------

namespace {

int64_t json_int(const nlohmann::json& j, const std::string& key, const std::string& file) {
  SD_CHECK(j.contains(key), file, ": missing key '", key, "'");
  SD_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, file, ": key '", key,
           "' must be a positive integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}

// Depth-limited (io::k_max_json_depth); errors name the file.
nlohmann::json read_json(const std::string& path) { return io::read_json_file(path); }

ModelConfig gpt2_config_from_json(const nlohmann::json& j, const std::string& path);

}  // namespace

ModelConfig gpt2_config_from_hf(const std::string& path) {
  const nlohmann::json j = read_json(path);
  SD_CHECK(j.is_object(), path, ": expected a JSON object");
  try {
    return gpt2_config_from_json(j, path);
  } catch (const nlohmann::json::exception& e) {  // a key of the wrong type (j.value)
    fail(path, ": ", e.what());
  }
}

namespace {

ModelConfig gpt2_config_from_json(const nlohmann::json& j, const std::string& path) {
  const std::string type = j.value("model_type", std::string());
  SD_CHECK(type == "gpt2", path, ": model_type is '", type, "', expected 'gpt2'");
  ModelConfig c;
  c.arch = "gpt2";
  c.n_vocab = json_int(j, "vocab_size", path);
  c.n_ctx = json_int(j, j.contains("n_positions") ? "n_positions" : "n_ctx", path);
  c.d_model = json_int(j, "n_embd", path);
  c.n_layers = json_int(j, "n_layer", path);
  c.n_heads = c.n_kv_heads = json_int(j, "n_head", path);
  SD_CHECK(c.d_model % c.n_heads == 0, path, ": n_embd ", c.d_model,
           " is not a multiple of n_head ", c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  const bool has_inner = j.contains("n_inner") && !j["n_inner"].is_null();
  c.d_ff = has_inner ? json_int(j, "n_inner", path) : 4 * c.d_model;
  if (j.contains("layer_norm_epsilon")) {
    SD_CHECK(j["layer_norm_epsilon"].is_number(), path, ": key 'layer_norm_epsilon' must be a ",
             "number, got ", j["layer_norm_epsilon"].dump());
    c.norm_eps = j["layer_norm_epsilon"].get<double>();
  }
  const std::string act = j.value("activation_function", std::string("gelu_new"));
  SD_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, ": activation_function '", act,
           "' is not supported (only the tanh GELU: gelu_new, gelu_pytorch_tanh)");
  c.tie_embeddings = j.value("tie_word_embeddings", true);
  ConfigKeys keys;
  keys.n_layers = "n_layer";
  keys.d_model = "n_embd";
  keys.n_heads = keys.n_kv_heads = "n_head";
  keys.d_ff = "n_inner";
  keys.n_vocab = "vocab_size";
  keys.n_ctx = j.contains("n_positions") ? "n_positions" : "n_ctx";
  keys.norm_eps = "layer_norm_epsilon";
  check_config_limits(c, path, keys);
  return c;
}

}  // namespace

namespace {

// Reads HF GPT-2 tensors by name, accepting "transformer."-prefixed and bare names.
class HfReader {
 public:
  explicit HfReader(std::shared_ptr<io::SafetensorsModel> st) : st_(std::move(st)) {
    prefix_ = st_->find("transformer.wte.weight") ? "transformer." : "";
  }
  bool has(const std::string& name) const { return st_->find(name) != nullptr; }
  // Name relative to the transformer (e.g. "h.0.ln_1.weight"); `full` skips the prefix.
  at::Tensor get(const std::string& name, bool full = false) const {
    const std::string n = full ? name : prefix_ + name;
    const io::SafetensorsTensorInfo* info = st_->find(n);
    SD_CHECK(info, st_->dir(), ": tensor '", n, "' not found");
    at::Tensor t = at::empty(info->shape, at::kFloat);
    st_->read_f32(n, t.data_ptr<float>());
    return t;
  }
  // HF Conv1D keeps its weight as [in, out]; Linear wants [out, in].
  at::Tensor conv1d(const std::string& name) const { return get(name).t().contiguous(); }

 private:
  std::shared_ptr<io::SafetensorsModel> st_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<CausalLM> load_gpt2_hf_dir(const std::string& dir, at::ScalarType dtype) {
  ModelConfig cfg = gpt2_config_from_hf(dir + "/config.json");
  HfReader r(io::SafetensorsModel::open_dir(dir));
  Gpt2Tensors t;
  t.wte = r.get("wte.weight");
  t.wpe = r.get("wpe.weight");
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    Gpt2LayerTensors L;
    L.ln1_w = r.get(p + "ln_1.weight");
    L.ln1_b = r.get(p + "ln_1.bias");
    L.w_qkv = r.conv1d(p + "attn.c_attn.weight");
    L.b_qkv = r.get(p + "attn.c_attn.bias");
    L.w_o = r.conv1d(p + "attn.c_proj.weight");
    L.b_o = r.get(p + "attn.c_proj.bias");
    L.ln2_w = r.get(p + "ln_2.weight");
    L.ln2_b = r.get(p + "ln_2.bias");
    L.w_fc = r.conv1d(p + "mlp.c_fc.weight");
    L.b_fc = r.get(p + "mlp.c_fc.bias");
    L.w_proj = r.conv1d(p + "mlp.c_proj.weight");
    L.b_proj = r.get(p + "mlp.c_proj.bias");
    t.layers.push_back(std::move(L));
  }
  t.lnf_w = r.get("ln_f.weight");
  t.lnf_b = r.get("ln_f.bias");
  if (!cfg.tie_embeddings) {
    SD_CHECK(r.has("lm_head.weight"), dir, ": tie_word_embeddings is false but tensor ",
             "'lm_head.weight' is missing");
    t.lm_head = r.get("lm_head.weight", /*full=*/true);
  }
  return make_gpt2(cfg, std::move(t), dtype);
}

// ---- GGUF ------------------------------------------------------------------------------------

namespace {

at::Tensor gguf_tensor(const io::GgufFile& f, const std::string& name) {
  const io::GgufTensorInfo* info = f.find_tensor(name);
  SD_CHECK(info, f.path(), ": tensor '", name, "' not found");
  at::Tensor t = at::empty(info->shape(), at::kFloat);
  f.read_f32(*info, t.data_ptr<float>());
  return t;
}

}  // namespace

std::shared_ptr<CausalLM> load_gpt2_gguf(const io::GgufFile& f, at::ScalarType dtype) {
  const std::string arch = f.get_string("general.architecture");
  SD_CHECK(arch == "gpt2", f.path(), ": general.architecture is '", arch, "', expected 'gpt2'");
  ModelConfig c;
  c.arch = "gpt2";
  c.n_ctx = f.get_int("gpt2.context_length");
  c.d_model = f.get_int("gpt2.embedding_length");
  c.d_ff = f.get_int("gpt2.feed_forward_length");
  c.n_layers = f.get_int("gpt2.block_count");
  c.n_heads = c.n_kv_heads = f.get_int("gpt2.attention.head_count");
  SD_CHECK(c.n_heads > 0 && c.d_model % c.n_heads == 0, f.path(), ": gpt2.embedding_length ",
           c.d_model, " is not a multiple of gpt2.attention.head_count ", c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  c.norm_eps = f.get_float_or("gpt2.attention.layer_norm_epsilon", 1e-5);
  {
    const io::GgufTensorInfo* wte = f.find_tensor("token_embd.weight");
    SD_CHECK(wte && wte->ne.size() == 2, f.path(), ": tensor token_embd.weight is missing or not 2-D");
    c.n_vocab = wte->shape()[0];
    ConfigKeys keys;
    keys.n_layers = "gpt2.block_count";
    keys.d_model = "gpt2.embedding_length";
    keys.n_heads = keys.n_kv_heads = "gpt2.attention.head_count";
    keys.d_ff = "gpt2.feed_forward_length";
    keys.n_vocab = "token_embd.weight rows (n_vocab)";
    keys.n_ctx = "gpt2.context_length";
    keys.norm_eps = "gpt2.attention.layer_norm_epsilon";
    check_config_limits(c, f.path(), keys);
  }
  // llama.cpp's converter stores the Conv1D weights already transposed to [out, in].
  Gpt2Tensors t;
  t.wte = gguf_tensor(f, "token_embd.weight");
  c.n_vocab = t.wte.size(0);
  t.wpe = gguf_tensor(f, "position_embd.weight");
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Gpt2LayerTensors L;
    L.ln1_w = gguf_tensor(f, p + "attn_norm.weight");
    L.ln1_b = gguf_tensor(f, p + "attn_norm.bias");
    L.w_qkv = gguf_tensor(f, p + "attn_qkv.weight");
    L.b_qkv = gguf_tensor(f, p + "attn_qkv.bias");
    L.w_o = gguf_tensor(f, p + "attn_output.weight");
    L.b_o = gguf_tensor(f, p + "attn_output.bias");
    L.ln2_w = gguf_tensor(f, p + "ffn_norm.weight");
    L.ln2_b = gguf_tensor(f, p + "ffn_norm.bias");
    L.w_fc = gguf_tensor(f, p + "ffn_up.weight");
    L.b_fc = gguf_tensor(f, p + "ffn_up.bias");
    L.w_proj = gguf_tensor(f, p + "ffn_down.weight");
    L.b_proj = gguf_tensor(f, p + "ffn_down.bias");
    t.layers.push_back(std::move(L));
  }
  t.lnf_w = gguf_tensor(f, "output_norm.weight");
  t.lnf_b = gguf_tensor(f, "output_norm.bias");
  if (f.find_tensor("output.weight")) t.lm_head = gguf_tensor(f, "output.weight");
  return make_gpt2(c, std::move(t), dtype);
}

// ---- tiny random GPT-2 -----------------------------------------------------------------------

ModelConfig tiny_gpt2_config() {
  ModelConfig c;
  c.arch = "gpt2";
  c.n_vocab = 64;
  c.n_ctx = 128;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = c.n_kv_heads = 4;
  c.head_dim = 8;
  c.d_ff = 128;
  c.norm_eps = 1e-5;
  c.tie_embeddings = true;
  return c;
}

Gpt2Tensors make_tiny_gpt2_tensors(const ModelConfig& c, uint64_t seed) {
  check_config(c);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto normal = [&](std::vector<int64_t> shape, double mean, double std) {
    return at::empty(shape, at::kFloat).normal_(mean, std, gen);
  };
  const int64_t d = c.d_model;
  Gpt2Tensors t;
  t.wte = normal({c.n_vocab, d}, 0, 0.02);
  t.wpe = normal({c.n_ctx, d}, 0, 0.01);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    Gpt2LayerTensors L;
    L.ln1_w = normal({d}, 1, 0.1);
    L.ln1_b = normal({d}, 0, 0.02);
    L.w_qkv = normal({3 * d, d}, 0, 0.02);
    L.b_qkv = normal({3 * d}, 0, 0.02);
    L.w_o = normal({d, d}, 0, 0.02);
    L.b_o = normal({d}, 0, 0.02);
    L.ln2_w = normal({d}, 1, 0.1);
    L.ln2_b = normal({d}, 0, 0.02);
    L.w_fc = normal({c.d_ff, d}, 0, 0.02);
    L.b_fc = normal({c.d_ff}, 0, 0.02);
    L.w_proj = normal({d, c.d_ff}, 0, 0.02);
    L.b_proj = normal({d}, 0, 0.02);
    t.layers.push_back(std::move(L));
  }
  t.lnf_w = normal({d}, 1, 0.1);
  t.lnf_b = normal({d}, 0, 0.02);
  return t;
}

std::shared_ptr<CausalLM> make_tiny_gpt2(const ModelConfig& cfg, uint64_t seed,
                                         at::ScalarType dtype) {
  return make_gpt2(cfg, make_tiny_gpt2_tensors(cfg, seed), dtype);
}

}  // namespace specdec::model
