// model::load(): GGUF files, HF directories and tiny random models (see causal_lm.h).
#include "model/loader.h"
#include "model/checks.h"

#include <ATen/Parallel.h>
#include <malloc.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel.h"
#include "io/dequant.h"
#include "io/gguf.h"
#include "io/json_limits.h"
#include "io/mapped_file.h"
#include "io/quantize.h"
#include "io/safetensors.h"
#include "model/config_limits.h"
#include "model/gpt2.h"
#include "model/llama.h"
#include "model/llama_aten.h"
#include "model/panels.h"
#include "model/tiny.h"
#include "tokenizer/tokenizer.h"

namespace specdec::model {

namespace {

// One tensor to fill: `run` reads (and converts) it into its preallocated destination.
struct ReadTask {
  std::string name;
  int64_t n_elements = 0;
  std::function<void()> run;
};

// Runs the reads in parallel, largest first, one task per chunk of the thread pool (so both
// cores stay busy while the embedding dequantises). The first failure is rethrown by
// parallel_for once every task has returned.
void run_parallel(std::vector<ReadTask>& tasks) {
  std::sort(tasks.begin(), tasks.end(),
            [](const ReadTask& a, const ReadTask& b) { return a.n_elements > b.n_elements; });
  parallel::parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) tasks[static_cast<size_t>(i)].run();
  });
}

// GGUF: checks name/shape now (before any work), queues the dequantisation into `dst`.
// permute_heads > 0 restores HF row order of a q/k weight with that many heads.
void queue_gguf(const io::GgufFile& f, const std::string& name, std::vector<int64_t> shape,
                at::Tensor& dst, std::vector<ReadTask>& tasks, int64_t permute_heads = 0) {
  const io::GgufTensorInfo* info = f.find_tensor(name);
  SD_CHECK(info != nullptr, "file ", f.path(), ": tensor ", name, " is missing (expected shape ",
           shape_str(shape), ")");
  SD_CHECK(info->shape() == shape, "file ", f.path(), ": tensor ", name, " has shape ",
           shape_str(info->shape()), ", expected ", shape_str(shape));
  dst = at::empty(shape, at::kFloat);
  at::Tensor* out = &dst;
  tasks.push_back({name, info->n_elements(), [&f, info, out, permute_heads] {
                     f.read_f32(*info, out->data_ptr<float>());
                     if (permute_heads > 0) *out = unpermute_rope_rows(*out, permute_heads);
                   }});
}

void queue_st(const io::SafetensorsModel& m, const std::string& name, std::vector<int64_t> shape,
              at::Tensor& dst, std::vector<ReadTask>& tasks) {
  const io::SafetensorsTensorInfo* info = m.find(name);
  SD_CHECK(info != nullptr, "dir ", m.dir(), ": tensor ", name, " is missing (expected shape ",
           shape_str(shape), ")");
  SD_CHECK(info->shape == shape, "dir ", m.dir(), ": tensor ", name, " has shape ",
           shape_str(info->shape), ", expected ", shape_str(shape));
  dst = at::empty(shape, at::kFloat);
  at::Tensor* out = &dst;
  tasks.push_back({name, info->n_elements(),
                   [&m, name, out] { m.read_f32(name, out->data_ptr<float>()); }});
}

// The N of a tensor named "<prefix>N.<rest>", or -1.
int64_t layer_index(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t n = 0;
  size_t i = prefix.size();
  for (; i < name.size() && i < prefix.size() + 6 && std::isdigit(static_cast<unsigned char>(name[i])); ++i)
    n = n * 10 + (name[i] - '0');
  return i > prefix.size() && i < name.size() && name[i] == '.' ? n : -1;
}

}  // namespace

at::Tensor unpermute_rope_rows(const at::Tensor& w, int64_t n_heads) {
  SD_CHECK(w.dim() >= 1 && n_heads > 0 && w.size(0) % (2 * n_heads) == 0,
           "unpermute_rope_rows: ", w.size(0), " rows are not n_heads (", n_heads,
           ") x an even head_dim");
  const int64_t half = w.size(0) / n_heads / 2;
  std::vector<int64_t> split = {n_heads, half, 2};
  for (int64_t i = 1; i < w.dim(); ++i) split.push_back(w.size(i));
  // GGUF row h*hd + 2i + s holds HF row h*hd + s*half + i.
  return w.reshape(split).transpose(1, 2).reshape(w.sizes()).contiguous();
}

at::ScalarType parse_dtype(const std::string& dtype) {
  if (dtype == "auto" || dtype == "float32" || dtype == "fp32" || dtype.empty() || dtype == "native" ||
      dtype == "native_q8" || dtype == "q4_1")
    return at::kFloat;
  if (dtype == "bfloat16" || dtype == "bf16") return at::kBFloat16;
  fail("model dtype '", dtype, "' is not supported (use auto, float32, bfloat16, native, native_q8 or q4_1)");
}

ModelConfig llama_config_from_gguf(const io::GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  SD_CHECK(c.arch == "llama" || c.arch == "qwen2", "file ", f.path(),
           ": general.architecture '", c.arch, "' is not supported (llama, qwen2, gpt2)");
  const std::string p = c.arch + ".";
  c.n_layers = f.get_int(p + "block_count");
  c.d_model = f.get_int(p + "embedding_length");
  c.d_ff = f.get_int(p + "feed_forward_length");
  c.n_heads = f.get_int(p + "attention.head_count");
  c.n_kv_heads = f.get_int_or(p + "attention.head_count_kv", c.n_heads);
  c.norm_eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
  c.rope_theta = f.get_float_or(p + "rope.freq_base", 10000.0);
  c.n_ctx = f.get_int_or(p + "context_length", 0);
  SD_CHECK(c.n_heads > 0 && c.d_model > 0, "file ", f.path(), ": ", p,
           "attention.head_count and embedding_length must be positive");
  c.head_dim = f.get_int_or(p + "attention.key_length", c.d_model / c.n_heads);
  const int64_t rope_dim = f.get_int_or(p + "rope.dimension_count", c.head_dim);
  SD_CHECK(rope_dim == c.head_dim, "file ", f.path(), ": ", p, "rope.dimension_count = ",
           rope_dim, " but head_dim is ", c.head_dim, " (partial rotary is not supported)");
  std::string scaling = f.get_string_or(p + "rope.scaling.type", "");
  if (scaling == "none") scaling.clear();
  SD_CHECK(scaling.empty() || scaling == "linear", "file ", f.path(), ": ", p,
           "rope.scaling.type = '", scaling, "' is not supported (none, linear)");
  c.rope_scaling_type = scaling;
  c.rope_scaling_factor = f.get_float_or(p + "rope.scaling.factor", 1.0);
  c.rope_orig_ctx = f.get_int_or(p + "rope.scaling.original_context_length", c.n_ctx);
  const io::GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  SD_CHECK(emb != nullptr && emb->ne.size() == 2, "file ", f.path(),
           ": tensor token_embd.weight is missing or not 2-D (expected [n_vocab, ", c.d_model,
           "])");
  c.n_vocab = emb->shape()[0];
  c.tie_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  ConfigKeys keys;
  keys.n_layers = p + "block_count";
  keys.d_model = p + "embedding_length";
  keys.n_heads = p + "attention.head_count";
  keys.n_kv_heads = p + "attention.head_count_kv";
  keys.head_dim = p + "attention.key_length";
  keys.d_ff = p + "feed_forward_length";
  keys.n_vocab = "token_embd.weight rows (n_vocab)";
  keys.n_ctx = p + "context_length";
  keys.norm_eps = p + "attention.layer_norm_rms_epsilon";
  keys.rope_theta = p + "rope.freq_base";
  keys.rope_scaling_factor = p + "rope.scaling.factor";
  check_config_limits(c, "file " + f.path(), keys);
  SD_CHECK(emb->shape()[1] == c.d_model, "file ", f.path(), ": tensor token_embd.weight has ", emb->shape()[1],
           " columns but ", keys.d_model, " = ", c.d_model);
  int64_t n_present = 0;
  for (const io::GgufTensorInfo& t : f.tensors()) n_present = std::max(n_present, layer_index(t.name, "blk.") + 1);
  SD_CHECK(n_present >= c.n_layers, "file ", f.path(), ": ", keys.n_layers, " = ", c.n_layers,
           " but the file has tensors for ", n_present, " layers (named blk.<i>.*)");
  return c;
}

namespace {

// dtype native: a projection's blocks, viewed in the mapped file (checked like queue_gguf).
QuantBlocks gguf_blocks(const io::GgufFile& f, const std::string& name, std::vector<int64_t> shape,
                        int64_t rope_heads = 0) {
  const io::GgufTensorInfo* info = f.find_tensor(name);
  SD_CHECK(info != nullptr, "file ", f.path(), ": tensor ", name, " is missing (expected shape ",
           shape_str(shape), ")");
  SD_CHECK(info->shape() == shape, "file ", f.path(), ": tensor ", name, " has shape ",
           shape_str(info->shape()), ", expected ", shape_str(shape));
  QuantBlocks q;
  q.name = f.path() + ": " + name;
  q.type = info->type;
  q.data = f.tensor_data(*info);
  q.out = shape[0];
  q.in = shape[1];
  q.rope_heads = rope_heads;
  q.file_mapped = f.mapped();
  return q;
}

// dtype q4_1: the blocks of `q` requantised to Q4_1, row by row in parallel (dequantised to
// fp32, then quantised; io/quantize.h). The returned blocks own their bytes (`storage`) until
// they are packed.
QuantBlocks requantize(const QuantBlocks& q, io::GgmlType to) {
  if (q.type == to) return q;
  SD_CHECK(io::ggml_type_supported(q.type), q.name, ": ggml type ", io::ggml_type_name(q.type),
           " cannot be read for requantising to ", io::ggml_type_name(to));
  const int64_t in_bytes = q.in / io::ggml_block_size(q.type) * io::ggml_type_size(q.type);
  const int64_t out_bytes = q.in / io::ggml_block_size(to) * io::ggml_type_size(to);
  SD_CHECK(q.in % io::ggml_block_size(to) == 0, q.name, ": rows of ", q.in, " values are not a whole number of ",
           io::ggml_type_name(to), " blocks of ", io::ggml_block_size(to));
  auto storage = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(q.out * out_bytes));
  const std::string who = q.name + " (requantising to " + io::ggml_type_name(to) + ")";
  parallel::parallel_for(q.out, 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(q.in));
    for (int64_t r = r0; r < r1; ++r) {
      io::dequantize(q.type, q.data + r * in_bytes, row.data(), q.in);
      io::quantize(to, row.data(), storage->data() + r * out_bytes, q.in, who.c_str());
    }
  });
  if (q.file_mapped) io::drop_mapped_pages(q.data, static_cast<size_t>(q.out * in_bytes));
  QuantBlocks out = q;
  out.type = to;
  out.data = storage->data();
  out.storage = std::move(storage);
  out.file_mapped = false;
  return out;
}

}  // namespace

namespace {

// The tensors of a "llama"/"qwen2" GGUF (see load_llama_gguf) and its config.
LlamaTensors read_llama_gguf(const io::GgufFile& f, GgufWeights weights, ModelConfig& config) {
  const bool native = weights != GgufWeights::kDequantised;
  // The blocks of a projection, embedding or head, requantised for dtype q4_1.
  const auto blocks = [&](const std::string& name, std::vector<int64_t> shape, int64_t rope_heads = 0) {
    QuantBlocks q = gguf_blocks(f, name, std::move(shape), rope_heads);
    return weights == GgufWeights::kQ4_1 ? requantize(q, io::GgmlType::Q4_1) : q;
  };
  config = llama_config_from_gguf(f);
  const ModelConfig& c = config;
  const int64_t d = c.d_model, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  // llama.cpp permutes q/k only for arch "llama"; qwen2 GGUFs keep HF order (NEOX rope).
  const bool permuted = c.arch == "llama";
  LlamaTensors t;
  t.layers.resize(c.n_layers);
  std::vector<ReadTask> tasks;
  t.native_int8_dot = weights == GgufWeights::kNativeQ8 || weights == GgufWeights::kQ4_1;
  if (native) {
    t.native_tok_embd = blocks("token_embd.weight", {c.n_vocab, d});
    if (!c.tie_embeddings) t.native_output = blocks("output.weight", {c.n_vocab, d});
  } else {
    queue_gguf(f, "token_embd.weight", {c.n_vocab, d}, t.tok_embd, tasks);
    if (!c.tie_embeddings) queue_gguf(f, "output.weight", {c.n_vocab, d}, t.output, tasks);
  }
  queue_gguf(f, "output_norm.weight", {d}, t.out_norm, tasks);
  if (f.find_tensor("rope_freqs.weight"))
    queue_gguf(f, "rope_freqs.weight", {c.head_dim / 2}, t.rope_freqs, tasks);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LlamaLayerTensors& L = t.layers[i];
    queue_gguf(f, b + "attn_norm.weight", {d}, L.attn_norm, tasks);
    if (native) {
      auto& N = L.native;
      N.wq = blocks(b + "attn_q.weight", {q_dim, d}, permuted ? c.n_heads : 0);
      N.wk = blocks(b + "attn_k.weight", {kv_dim, d}, permuted ? c.n_kv_heads : 0);
      N.wv = blocks(b + "attn_v.weight", {kv_dim, d});
      N.wo = blocks(b + "attn_output.weight", {d, q_dim});
      N.w_gate = blocks(b + "ffn_gate.weight", {c.d_ff, d});
      N.w_up = blocks(b + "ffn_up.weight", {c.d_ff, d});
      N.w_down = blocks(b + "ffn_down.weight", {d, c.d_ff});
    } else {
      queue_gguf(f, b + "attn_q.weight", {q_dim, d}, L.wq, tasks, permuted ? c.n_heads : 0);
      queue_gguf(f, b + "attn_k.weight", {kv_dim, d}, L.wk, tasks, permuted ? c.n_kv_heads : 0);
      queue_gguf(f, b + "attn_v.weight", {kv_dim, d}, L.wv, tasks);
      queue_gguf(f, b + "attn_output.weight", {d, q_dim}, L.wo, tasks);
      queue_gguf(f, b + "ffn_gate.weight", {c.d_ff, d}, L.w_gate, tasks);
      queue_gguf(f, b + "ffn_up.weight", {c.d_ff, d}, L.w_up, tasks);
      queue_gguf(f, b + "ffn_down.weight", {d, c.d_ff}, L.w_down, tasks);
    }
    if (c.qkv_bias) {
      queue_gguf(f, b + "attn_q.bias", {q_dim}, L.bq, tasks, permuted ? c.n_heads : 0);
      queue_gguf(f, b + "attn_k.bias", {kv_dim}, L.bk, tasks, permuted ? c.n_kv_heads : 0);
      queue_gguf(f, b + "attn_v.bias", {kv_dim}, L.bv, tasks);
    }
    queue_gguf(f, b + "ffn_norm.weight", {d}, L.ffn_norm, tasks);
  }
  run_parallel(tasks);
  return t;
}

}  // namespace

std::shared_ptr<CausalLM> load_llama_gguf(const io::GgufFile& f, at::ScalarType dtype, GgufWeights weights) {
  ModelConfig c;
  LlamaTensors t = read_llama_gguf(f, weights, c);
  return make_llama(c, std::move(t), dtype);
}

std::shared_ptr<CausalLM> load_llama_gguf_aten(const io::GgufFile& f, at::ScalarType dtype, at::Device device,
                                               bool static_steps) {
  check_device(device, "file " + f.path());  // before reading gigabytes
  ModelConfig c;
  LlamaTensors t = read_llama_gguf(f, GgufWeights::kDequantised, c);
  return make_llama_aten(c, std::move(t), dtype, device, static_steps);
}

namespace {

// Depth-limited (io::k_max_json_depth); errors name the file.
nlohmann::json read_json(const std::string& path) {
  nlohmann::json j = io::read_json_file(path);
  SD_CHECK(j.is_object(), path, ": expected a JSON object, got ", j.type_name());
  return j;
}

int64_t json_int(const nlohmann::json& j, const std::string& key, const std::string& path) {
  SD_CHECK(j.contains(key) && j[key].is_number_integer(), path, ": key '", key,
           "' is missing or not an integer");
  return j[key].get<int64_t>();
}

// Optional keys: absent or null gives the default; any other type is an error naming the key
// (a silently ignored "rms_norm_eps": "1e-5" would load a different model).
int64_t json_int_or(const nlohmann::json& j, const std::string& key, int64_t def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  SD_CHECK(j[key].is_number_integer(), path, ": key '", key, "' must be an integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}

double json_float_or(const nlohmann::json& j, const std::string& key, double def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  SD_CHECK(j[key].is_number(), path, ": key '", key, "' must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

bool json_bool_or(const nlohmann::json& j, const std::string& key, bool def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  SD_CHECK(j[key].is_boolean(), path, ": key '", key, "' must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

std::string json_string_or(const nlohmann::json& j, const std::string& key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return "";
  SD_CHECK(j[key].is_string(), path, ": key '", key, "' must be a string, got ", j[key].dump());
  return j[key].get<std::string>();
}

// rope_theta and rope_scaling; transformers 5 writes both into "rope_parameters".
void read_hf_rope(const nlohmann::json& j, const std::string& path, ModelConfig& c) {
  const nlohmann::json* rp = nullptr;
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rp = &j["rope_scaling"];
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rp = &j["rope_parameters"];
  c.rope_theta = json_float_or(j, "rope_theta", rp ? json_float_or(*rp, "rope_theta", 1e4, path) : 1e4, path);
  if (!rp) return;
  std::string type;
  for (const char* k : {"rope_type", "type"})
    if (rp->contains(k) && (*rp)[k].is_string()) type = (*rp)[k].get<std::string>();
  if (type == "default") type.clear();
  SD_CHECK(type.empty() || type == "linear" || type == "llama3", path, ": rope type '", type,
           "' is not supported (default, linear, llama3)");
  c.rope_scaling_type = type;
  c.rope_scaling_factor = json_float_or(*rp, "factor", 1.0, path);
  c.rope_low_freq_factor = json_float_or(*rp, "low_freq_factor", c.rope_low_freq_factor, path);
  c.rope_high_freq_factor = json_float_or(*rp, "high_freq_factor", c.rope_high_freq_factor, path);
  c.rope_orig_ctx = json_int_or(*rp, "original_max_position_embeddings", c.n_ctx, path);
}

ModelConfig llama_config_from_hf(const std::string& path, const io::SafetensorsModel& m) {
  const nlohmann::json j = read_json(path);
  ModelConfig c;
  c.arch = json_string_or(j, "model_type", path);
  SD_CHECK(c.arch == "llama" || c.arch == "qwen2", path, ": model_type '", c.arch,
           "' is not supported (llama, qwen2, gpt2)");
  c.n_vocab = json_int(j, "vocab_size", path);
  c.d_model = json_int(j, "hidden_size", path);
  c.d_ff = json_int(j, "intermediate_size", path);
  c.n_layers = json_int(j, "num_hidden_layers", path);
  c.n_heads = json_int(j, "num_attention_heads", path);
  c.n_kv_heads = json_int_or(j, "num_key_value_heads", c.n_heads, path);
  SD_CHECK(c.n_heads > 0, path, ": num_attention_heads = ", c.n_heads, " must be positive");
  c.head_dim = json_int_or(j, "head_dim", c.d_model / c.n_heads, path);
  c.norm_eps = json_float_or(j, "rms_norm_eps", 1e-6, path);
  c.n_ctx = json_int_or(j, "max_position_embeddings", 0, path);
  read_hf_rope(j, path, c);
  c.qkv_bias = c.arch == "qwen2" || json_bool_or(j, "attention_bias", false, path);
  c.tie_embeddings = json_bool_or(j, "tie_word_embeddings", false, path) || m.find("lm_head.weight") == nullptr;
  ConfigKeys keys;
  keys.n_layers = "num_hidden_layers";
  keys.d_model = "hidden_size";
  keys.n_heads = "num_attention_heads";
  keys.n_kv_heads = "num_key_value_heads";
  keys.d_ff = "intermediate_size";
  keys.n_vocab = "vocab_size";
  keys.n_ctx = "max_position_embeddings";
  keys.norm_eps = "rms_norm_eps";
  keys.rope_scaling_factor = "rope_scaling.factor";
  check_config_limits(c, path, keys);
  int64_t n_present = 0;
  for (const std::string& name : m.tensor_names())
    n_present = std::max(n_present, layer_index(name, "model.layers.") + 1);
  SD_CHECK(n_present >= c.n_layers, path, ": num_hidden_layers = ", c.n_layers, " but ", m.dir(),
           " has tensors for ", n_present, " layers (named model.layers.<i>.*)");
  return c;
}

// The tensors of an HF Llama/Qwen2 directory (see load_llama_hf_dir) and its config.
LlamaTensors read_llama_hf_dir(const std::string& dir, ModelConfig& config) {
  auto m = io::SafetensorsModel::open_dir(dir);
  config = llama_config_from_hf(m->config_json_path(), *m);
  const ModelConfig& c = config;
  const int64_t d = c.d_model, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  LlamaTensors t;
  t.layers.resize(c.n_layers);
  std::vector<ReadTask> tasks;
  queue_st(*m, "model.embed_tokens.weight", {c.n_vocab, d}, t.tok_embd, tasks);
  queue_st(*m, "model.norm.weight", {d}, t.out_norm, tasks);
  if (!c.tie_embeddings) queue_st(*m, "lm_head.weight", {c.n_vocab, d}, t.output, tasks);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "model.layers." + std::to_string(i) + ".";
    LlamaLayerTensors& L = t.layers[i];
    queue_st(*m, b + "input_layernorm.weight", {d}, L.attn_norm, tasks);
    queue_st(*m, b + "self_attn.q_proj.weight", {q_dim, d}, L.wq, tasks);
    queue_st(*m, b + "self_attn.k_proj.weight", {kv_dim, d}, L.wk, tasks);
    queue_st(*m, b + "self_attn.v_proj.weight", {kv_dim, d}, L.wv, tasks);
    queue_st(*m, b + "self_attn.o_proj.weight", {d, q_dim}, L.wo, tasks);
    if (c.qkv_bias) {
      queue_st(*m, b + "self_attn.q_proj.bias", {q_dim}, L.bq, tasks);
      queue_st(*m, b + "self_attn.k_proj.bias", {kv_dim}, L.bk, tasks);
      queue_st(*m, b + "self_attn.v_proj.bias", {kv_dim}, L.bv, tasks);
    }
    queue_st(*m, b + "post_attention_layernorm.weight", {d}, L.ffn_norm, tasks);
    queue_st(*m, b + "mlp.gate_proj.weight", {c.d_ff, d}, L.w_gate, tasks);
    queue_st(*m, b + "mlp.up_proj.weight", {c.d_ff, d}, L.w_up, tasks);
    queue_st(*m, b + "mlp.down_proj.weight", {d, c.d_ff}, L.w_down, tasks);
  }
  run_parallel(tasks);
  return t;
}

}  // namespace

std::shared_ptr<CausalLM> load_llama_hf_dir(const std::string& dir, at::ScalarType dtype) {
  ModelConfig c;
  LlamaTensors t = read_llama_hf_dir(dir, c);
  return make_llama(c, std::move(t), dtype);
}

std::shared_ptr<CausalLM> load_llama_hf_dir_aten(const std::string& dir, at::ScalarType dtype,
                                                 at::Device device, bool static_steps) {
  check_device(device, "dir " + dir);
  ModelConfig c;
  LlamaTensors t = read_llama_hf_dir(dir, c);
  return make_llama_aten(c, std::move(t), dtype, device, static_steps);
}

void check_device(const at::Device& device, const std::string& who) {
  if (device.is_cpu()) return;
  SD_CHECK(device.is_cuda(), who, ": device ", device.str(), " is not supported (cpu or cuda)");
  SD_CHECK(at::hasCUDA(), who, ": device ", device.str(),
           " requested, but this LibTorch build has no CUDA or no CUDA device is present");
  const int64_t n = static_cast<int64_t>(at::getNumGPUs());
  SD_CHECK(!device.has_index() || device.index() < n, who, ": device ", device.str(), " requested, but only ", n,
           " CUDA device(s) are present (cuda:0 .. cuda:", n - 1, ")");
}

Engine parse_engine(const std::string& engine, const at::Device& device, const std::string& who) {
  if (engine == "auto") return device.is_cpu() ? Engine::kPacked : Engine::kAten;
  if (engine == "aten") return Engine::kAten;
  SD_CHECK(engine == "packed", who, ": engine '", engine, "' is not valid (use auto, packed or aten)");
  SD_CHECK(device.is_cpu(), who, ": engine packed runs on the CPU only, but device ", device.str(),
           " was requested (use engine aten or auto)");
  return Engine::kPacked;
}

void set_threads(int threads, bool allow_oversubscribe) {
  SD_CHECK(threads >= 0, "threads must be >= 0 (0: all cores), got ", threads);
  parallel::set_num_threads(threads > 0 ? threads : parallel::hardware_threads(), allow_oversubscribe);
  // ATen, OpenBLAS and oneDNN stay single-threaded: the pool runs every parallel loop, and a
  // second set of (spinning) OpenMP threads would compete with it.
  at::set_num_threads(1);
}

namespace {
// While a model loads, LibTorch's element-wise copies (dtype conversion, concatenation, panel
// packing of gigabytes of weights) run on all the engine's threads; afterwards it is back to
// one thread, so that only the pool runs parallel work while the model generates.
struct LoadThreads {
  explicit LoadThreads(int n) { at::set_num_threads(n); }
  ~LoadThreads() { at::set_num_threads(1); }
};
}  // namespace

at::Tensor CausalLM::embed(const at::Tensor&) const {
  fail(config().arch, " model: this engine does not expose its embedding table (trained drafters need the "
       "Llama-family engines)");
}
at::Tensor CausalLM::head_rows(const at::Tensor&) const {
  fail(config().arch, " model: this engine does not expose its output head (trained drafters need the "
       "Llama-family engines)");
}
at::Tensor CausalLM::output_head(const at::Tensor&) const {
  fail(config().arch, " model: this engine does not expose its output head (trained drafters need the "
       "Llama-family engines)");
}

LoadedModel load(const ModelSpec& spec) {
  set_threads(spec.threads, spec.threads_oversubscribe);
  const LoadThreads load_threads(parallel::num_threads());
  const at::ScalarType dtype = parse_dtype(spec.dtype);
  const bool auto_dtype = spec.dtype == "auto" || spec.dtype.empty();
  GgufWeights weights = spec.dtype == "native"      ? GgufWeights::kNative
                        : spec.dtype == "native_q8" ? GgufWeights::kNativeQ8
                        : spec.dtype == "q4_1"      ? GgufWeights::kQ4_1
                                                    : GgufWeights::kDequantised;
  // Whether the model keeps a GGUF file's blocks (every dtype but the dequantised ones); dtype
  // auto can still choose kNative below, once the file's architecture is known.
  const auto native = [&weights] { return weights != GgufWeights::kDequantised; };
  const std::string who = "model " + spec.name;
  const at::Device device = parse_device(spec.device, who);
  const bool aten = parse_engine(spec.engine, device, who) == Engine::kAten;
  check_device(device, who);
  SD_CHECK(spec.graphs == "auto" || spec.graphs == "on" || spec.graphs == "off", who, ": graphs '", spec.graphs,
           "' is not valid (use auto, on or off)");
  SD_CHECK(spec.graphs != "on" || aten, who, ": graphs on needs the ATen engine (engine aten, or a cuda device), got engine ",
           spec.engine, " on ", spec.device);
  // Static, graph-captured steps: on by default where they pay (CUDA); on the CPU they are the
  // GPU path's twin, for tests and comparisons.
  const bool static_steps = spec.graphs == "on" || (spec.graphs == "auto" && aten && device.is_cuda());
  LoadedModel out;
  out.spec = spec;
  const std::string& path = spec.path;
  namespace fs = std::filesystem;
  const bool gguf = path != "tiny-llama" && path != "tiny-gpt2" && !fs::is_directory(path);
  // dtype auto (the default): a Llama-family GGUF file on the packed CPU engine keeps its own
  // blocks (native: the same logits as float32 bit for bit, with 3-5x less memory and faster
  // at every row count measured, results/engine.md); everything else loads as float32. The
  // choice is recorded in out.spec.dtype.
  if (auto_dtype) out.spec.dtype = "float32";
  // What the ATen engine (llama_aten.h) does not cover: GGUF blocks, GPT-2, the tiny models.
  const std::string on = " (engine " + spec.engine + ", device " + spec.device + ")";
  SD_CHECK(!aten || !native(), who, ": dtype ", spec.dtype, " keeps GGUF blocks for the packed CPU engine; the ATen ",
           "engine", on, " needs float32 or bfloat16");
  SD_CHECK(!aten || (path != "tiny-llama" && path != "tiny-gpt2"), who, ": ", path,
           " runs on the packed CPU engine only; the ATen engine", on, " loads Llama-family GGUF files and HF dirs");
  SD_CHECK(!native() || gguf, "model ", spec.name, ": dtype ", spec.dtype, " keeps a GGUF file's own blocks, but '",
           path, "' is not a GGUF file (use float32 or bfloat16)");
  if (path == "tiny-llama") {
    SD_CHECK(dtype == at::kFloat, "model ", spec.name, ": tiny-llama is float32 only");
    out.model = make_tiny_llama(tiny_llama_config(), spec.seed);  // no tokenizer
  } else if (path == "tiny-gpt2") {
    out.model = make_tiny_gpt2(tiny_gpt2_config(), spec.seed, dtype);
  } else if (fs::is_directory(path)) {
    const std::string cfg_path = path + "/config.json";
    const nlohmann::json j = read_json(cfg_path);
    const std::string type = json_string_or(j, "model_type", cfg_path);
    SD_CHECK(!aten || type != "gpt2", who, ": GPT-2 (", path, ") has no ATen engine", on,
             "; use engine packed on device cpu");
    out.model = type == "gpt2" ? load_gpt2_hf_dir(path, dtype)
                : aten         ? load_llama_hf_dir_aten(path, dtype, device, static_steps)
                               : load_llama_hf_dir(path, dtype);
    const std::string tok = path + "/tokenizer.json";
    SD_CHECK(fs::exists(tok), "model dir ", path, ": tokenizer.json is missing");
    out.tokenizer = tokenizer::Tokenizer::from_hf_json(tok);
  } else {
    SD_CHECK(fs::is_regular_file(path), "model ", spec.name, ": '", path,
             "' is neither a file, a directory, nor tiny-llama/tiny-gpt2");
    auto f = io::GgufFile::open(path);
    const std::string arch = f->get_string("general.architecture");
    if (auto_dtype && !aten && arch != "gpt2") {
      weights = GgufWeights::kNative;
      out.spec.dtype = "native";
    }
    SD_CHECK(!native() || arch != "gpt2", "model ", spec.name, ": dtype ", spec.dtype, " is not implemented for ",
             "GPT-2 GGUF files (", path, "); use float32 or bfloat16");
    SD_CHECK(!aten || arch != "gpt2", who, ": GPT-2 (", path, ") has no ATen engine", on,
             "; use engine packed on device cpu");
    out.model = arch == "gpt2" ? load_gpt2_gguf(*f, dtype)
                : aten         ? load_llama_gguf_aten(*f, dtype, device, static_steps)
                               : load_llama_gguf(*f, dtype, weights);
    out.tokenizer = tokenizer::Tokenizer::from_gguf(*f);
  }
  // Every id the tokenizer can produce must index the embedding (HF Qwen: 151,665 token ids,
  // 151,936 embedding rows; the converse would read past the table).
  if (out.tokenizer) {
    const int64_t n_tok = out.tokenizer->vocab_size(), n_vocab = out.model->config().n_vocab;
    SD_CHECK(n_tok <= n_vocab, "model ", spec.name, " (", path, "): the tokenizer has ", n_tok,
             " token ids but the model's embedding only ", n_vocab, " rows");
  }
#ifdef __GLIBC__
  // Loading freed its temporary buffers (dequantised or requantised tensors); hand their pages
  // back, so that they do not stay in the RSS as free heap.
  malloc_trim(0);
#endif
  return out;
}

}  // namespace specdec::model
