// EAGLE and Medusa heads (see draft_heads.h).
#include "model/draft_heads.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "model/llama_aten.h"

namespace specdec::model {
namespace {

using nlohmann::json;

constexpr int64_t k_fingerprint_rows = 16;

// name -> expected shape, in the order save() writes them.
std::vector<std::pair<std::string, std::vector<int64_t>>> param_shapes(const DraftHeadConfig& c) {
  const int64_t d = c.d_model, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  if (c.kind == "eagle")
    return {{"fc.weight", {d, 2 * d}}, {"fc.bias", {d}},    {"attn_norm", {d}},     {"wq", {q, d}},
            {"wk", {kv, d}},           {"wv", {kv, d}},     {"wo", {d, q}},         {"ffn_norm", {d}},
            {"w_gate", {c.d_ff, d}},   {"w_up", {c.d_ff, d}}, {"w_down", {d, c.d_ff}}};
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (int64_t i = 0; i < c.n_medusa; ++i) {
    out.push_back({"medusa." + std::to_string(i) + ".weight", {d, d}});
    out.push_back({"medusa." + std::to_string(i) + ".bias", {d}});
  }
  return out;
}

void check_config(const DraftHeadConfig& c, const std::string& where) {
  SD_CHECK(c.kind == "eagle" || c.kind == "medusa", where, ": kind must be eagle or medusa, got '", c.kind, "'");
  SD_CHECK(c.d_model > 0 && c.d_model <= (1 << 16), where, ": d_model out of range: ", c.d_model);
  if (c.kind == "eagle") {
    SD_CHECK(c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0 && c.head_dim > 0 &&
                 c.head_dim % 2 == 0 && c.head_dim <= 1024 && c.n_heads <= 1024,
             where, ": bad attention shape (n_heads ", c.n_heads, ", n_kv_heads ", c.n_kv_heads, ", head_dim ",
             c.head_dim, ")");
    SD_CHECK(c.d_ff > 0 && c.d_ff <= (1 << 18), where, ": d_ff out of range: ", c.d_ff);
  } else {
    SD_CHECK(c.n_medusa > 0 && c.n_medusa <= 16, where, ": n_medusa must be in [1, 16], got ", c.n_medusa);
  }
  for (size_t i = 0; i < c.draft_vocab.size(); ++i)
    SD_CHECK(c.draft_vocab[i] >= 0 && c.draft_vocab[i] < c.target.n_vocab && (i == 0 || c.draft_vocab[i] > c.draft_vocab[i - 1]),
             where, ": draft_vocab must hold ascending ids in [0, ", c.target.n_vocab, "), entry ", i, " is ",
             c.draft_vocab[i]);
}

// The bias that goes with weight `w`, or "".
std::string bias_of(const std::string& w) {
  const std::string suffix = ".weight";
  if (w.size() > suffix.size() && w.compare(w.size() - suffix.size(), suffix.size(), suffix) == 0)
    return w.substr(0, w.size() - suffix.size()) + ".bias";
  return "";
}

json target_json(const HeadTarget& t) {
  return {{"name", t.name},         {"arch", t.arch},         {"n_vocab", t.n_vocab},
          {"d_model", t.d_model},   {"n_layers", t.n_layers}, {"fingerprint", t.fingerprint}};
}

}  // namespace

HeadTarget describe_target(const CausalLM& target, const std::string& name) {
  const ModelConfig& c = target.config();
  HeadTarget t{name, c.arch, c.n_vocab, c.d_model, c.n_layers, {}};
  at::Tensor ids = at::arange(k_fingerprint_rows, at::kLong) * (c.n_vocab / k_fingerprint_rows);
  const at::Tensor sums = target.embed(ids).to(at::kCPU).to(at::kDouble).sum(1);  // [16]
  for (int64_t i = 0; i < k_fingerprint_rows; ++i) t.fingerprint.push_back(sums[i].item<double>());
  return t;
}

void check_head_target(const std::string& head_dir, const HeadTarget& trained_on, const HeadTarget& actual) {
  bool same = trained_on.arch == actual.arch && trained_on.n_vocab == actual.n_vocab &&
              trained_on.d_model == actual.d_model && trained_on.n_layers == actual.n_layers &&
              trained_on.fingerprint.size() == actual.fingerprint.size();
  // Row sums of d_model entries: another precision of the same weights moves them by well under
  // 5% of the rows' spread; another model's rows differ by about that spread.
  double spread = 0;
  for (double v : trained_on.fingerprint) spread = std::max(spread, std::abs(v));
  for (size_t i = 0; same && i < actual.fingerprint.size(); ++i)
    same = std::abs(trained_on.fingerprint[i] - actual.fingerprint[i]) <= 0.05 * spread + 1e-6;
  SD_CHECK(same, "draft head '", head_dir, "' was trained on target '", trained_on.name, "' (", trained_on.arch, ", ",
           trained_on.n_layers, " layers, d_model ", trained_on.d_model, ", vocabulary ", trained_on.n_vocab,
           "), not on this target '", actual.name, "' (", actual.arch, ", ", actual.n_layers, " layers, d_model ",
           actual.d_model, ", vocabulary ", actual.n_vocab,
           trained_on.arch == actual.arch && trained_on.n_vocab == actual.n_vocab ? "; its embedding table differs" : "",
           "): train a head for this target with `specdec train-drafter`");
}

DraftHead DraftHead::init(const DraftHeadConfig& cfg, uint64_t seed) {
  check_config(cfg, "draft head");
  DraftHead h;
  h.cfg_ = cfg;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& [name, shape] : param_shapes(cfg)) {
    at::Tensor t;
    if (name.find("norm") != std::string::npos) {
      t = at::ones(shape, at::kFloat);
    } else if (name.find("bias") != std::string::npos || name.rfind("medusa.", 0) == 0) {
      t = at::zeros(shape, at::kFloat);  // Medusa's residual branch starts at zero
    } else {
      t = at::empty(shape, at::kFloat).normal_(0.0, 0.02, gen);
    }
    if (name == "fc.weight") t.narrow(1, cfg.d_model, cfg.d_model).add_(at::eye(cfg.d_model, at::kFloat));
    h.params_[name] = t;
  }
  if (cfg.kind == "eagle") {
    ModelConfig mc;
    mc.head_dim = cfg.head_dim;
    mc.rope_theta = cfg.rope_theta;
    h.inv_freq_ = rope_inv_freq(mc);
  }
  return h;
}

DraftHead DraftHead::fresh(const CausalLM& target, const std::string& kind, const std::string& target_name,
                           uint64_t seed, int64_t d_ff, int64_t n_medusa) {
  const ModelConfig& t = target.config();
  DraftHeadConfig c;
  c.kind = kind;
  c.d_model = t.d_model;
  if (kind == "eagle") {
    c.n_heads = t.n_heads;
    c.n_kv_heads = t.n_kv_heads;
    c.head_dim = t.head_dim;
    c.d_ff = d_ff > 0 ? d_ff : t.d_ff;
    c.norm_eps = t.norm_eps;
    c.rope_theta = t.rope_theta;
  } else {
    c.n_medusa = n_medusa;
  }
  c.target = describe_target(target, target_name);
  return init(c, seed);
}

void DraftHead::save(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  json j = {{"kind", cfg_.kind},         {"d_model", cfg_.d_model},       {"n_heads", cfg_.n_heads},
            {"n_kv_heads", cfg_.n_kv_heads}, {"head_dim", cfg_.head_dim}, {"d_ff", cfg_.d_ff},
            {"norm_eps", cfg_.norm_eps}, {"rope_theta", cfg_.rope_theta}, {"n_medusa", cfg_.n_medusa},
            {"target", target_json(cfg_.target)}, {"training", cfg_.training}};
  std::vector<at::Tensor> keep;
  std::vector<io::SafetensorsF32> out;
  for (const auto& [name, shape] : param_shapes(cfg_)) {
    keep.push_back(p(name).detach().to(at::kCPU).to(at::kFloat).contiguous());
    out.push_back({name, shape, keep.back().data_ptr<float>()});
  }
  if (!cfg_.draft_vocab.empty()) {  // ids < 2^24: exact in float32
    keep.push_back(at::tensor(cfg_.draft_vocab, at::kLong).to(at::kFloat));
    out.push_back({"draft_vocab", {static_cast<int64_t>(cfg_.draft_vocab.size())}, keep.back().data_ptr<float>()});
  }
  io::write_safetensors(dir + "/head.safetensors", out, {{"format", "pt"}, {"specdec_head", cfg_.kind}});
  const std::string tmp = dir + "/head.json.tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    SD_CHECK(f.good(), "draft head: cannot write '", tmp, "'");
  }
  std::filesystem::rename(tmp, dir + "/head.json");
}

DraftHead DraftHead::load(const std::string& dir) {
  const std::string jpath = dir + "/head.json", wpath = dir + "/head.safetensors";
  SD_CHECK(std::filesystem::is_directory(dir), "draft head '", dir,
           "': no such directory (train one with `specdec train-drafter --out ", dir, "`)");
  std::ifstream f(jpath);
  SD_CHECK(f.good(), "draft head '", dir, "': cannot read ", jpath);
  DraftHeadConfig c;
  try {
    const json j = json::parse(f);
    c.kind = j.at("kind").get<std::string>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.n_heads = j.value("n_heads", int64_t{0});
    c.n_kv_heads = j.value("n_kv_heads", int64_t{0});
    c.head_dim = j.value("head_dim", int64_t{0});
    c.d_ff = j.value("d_ff", int64_t{0});
    c.norm_eps = j.value("norm_eps", 1e-6);
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.n_medusa = j.value("n_medusa", int64_t{0});
    const json& t = j.at("target");
    c.target = {t.at("name").get<std::string>(),     t.at("arch").get<std::string>(),
                t.at("n_vocab").get<int64_t>(),      t.at("d_model").get<int64_t>(),
                t.at("n_layers").get<int64_t>(),     t.at("fingerprint").get<std::vector<double>>()};
    if (j.contains("training")) c.training = j.at("training").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    fail("draft head '", dir, "': ", jpath, " is not a head config: ", e.what());
  }
  const auto file = io::SafetensorsFile::open(wpath);
  if (const io::SafetensorsTensorInfo* info = file->find("draft_vocab")) {
    SD_CHECK(info->shape.size() == 1 && info->shape[0] > 0 && info->shape[0] <= c.target.n_vocab, "draft head '", dir,
             "': tensor 'draft_vocab' in ", wpath, " must be [n] with 0 < n <= the vocabulary (", c.target.n_vocab, ")");
    at::Tensor ids = at::empty({info->shape[0]}, at::kFloat);
    file->read_f32(*info, ids.data_ptr<float>());
    SD_CHECK(at::equal(ids, ids.round()), "draft head '", dir, "': 'draft_vocab' in ", wpath, " holds non-integers");
    const at::Tensor l = ids.to(at::kLong).contiguous();
    c.draft_vocab.assign(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
  }
  check_config(c, "draft head '" + dir + "' (" + jpath + ")");
  DraftHead h = init(c, 0);
  for (const auto& [name, shape] : param_shapes(c)) {
    const io::SafetensorsTensorInfo* info = file->find(name);
    SD_CHECK(info != nullptr, "draft head '", dir, "': ", wpath, " has no tensor '", name, "'");
    SD_CHECK(info->shape == shape, "draft head '", dir, "': tensor '", name, "' in ", wpath,
             " has the wrong shape for its head.json");
    at::Tensor t = at::empty(shape, at::kFloat);
    file->read_f32(*info, t.data_ptr<float>());
    h.params_[name] = t;
  }
  return h;
}

const at::Tensor& DraftHead::p(const std::string& name) const {
  const auto it = params_.find(name);
  SD_CHECK(it != params_.end(), "draft head: no parameter '", name, "'");
  return it->second;
}

void DraftHead::pack(at::ScalarType dtype) {
  packed_.clear();
  for (const auto& [name, shape] : param_shapes(cfg_)) {
    if (shape.size() != 2) continue;
    const std::string b = bias_of(name);
    packed_.emplace(name, Linear(p(name).detach().contiguous(), b.empty() ? at::Tensor() : p(b).detach(), dtype));
  }
}

void DraftHead::to(const at::Device& device) {
  SD_CHECK(packed_.empty() || device.is_cpu(), "draft head: a packed head runs on the host, not on ", device.str());
  for (auto& [name, t] : params_) t = t.detach().to(device);
  if (inv_freq_.defined()) inv_freq_ = inv_freq_.to(device);  // eagle's RoPE; a Medusa head has none
}

at::Tensor DraftHead::linear(const std::string& w, const std::string& b, const at::Tensor& x) const {
  const auto it = packed_.find(w);
  if (it != packed_.end()) return it->second(x.contiguous());
  return linear_aten(x, p(w), b.empty() ? at::Tensor() : p(b));
}

EagleOut DraftHead::eagle_forward(const at::Tensor& feat, const at::Tensor& emb, const at::Tensor& positions,
                                  const at::Tensor& k_past, const at::Tensor& v_past, const at::Tensor& mask) const {
  return eagle_forward(feat, emb, positions, {EagleSlot{feat.size(0), k_past, v_past, mask}});
}

EagleOut DraftHead::eagle_forward(const at::Tensor& feat, const at::Tensor& emb, const at::Tensor& positions,
                                  const std::vector<EagleSlot>& slots) const {
  const int64_t T = feat.size(0), H = cfg_.n_heads, Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim, g = H / Hkv;
  const at::Tensor x = linear("fc.weight", "fc.bias", at::cat({feat, emb}, 1));  // [T, d]
  const at::Tensor xn = rms_norm_aten(x, p("attn_norm"), cfg_.norm_eps);
  const at::Tensor ang = positions.to(x.device(), at::kFloat).unsqueeze(1) * inv_freq_.to(x.device());  // [T, hd/2]
  const at::Tensor cos = ang.cos().unsqueeze(1), sin = ang.sin().unsqueeze(1);           // [T, 1, hd/2]
  const at::Tensor q = rope_rotate_half(linear("wq", "", xn).view({T, H, hd}), cos, sin);
  const at::Tensor k = rope_rotate_half(linear("wk", "", xn).view({T, Hkv, hd}), cos, sin);
  const at::Tensor v = linear("wv", "", xn).view({T, Hkv, hd});
  std::vector<at::Tensor> outs;  // [rows, H hd] per slot
  int64_t begin = 0;
  for (const EagleSlot& s : slots) {
    const int64_t n = s.rows, P = s.k_past.defined() ? s.k_past.size(0) : 0;
    const at::Tensor ks = k.narrow(0, begin, n), vs = v.narrow(0, begin, n);
    const at::Tensor k_all = P > 0 ? at::cat({s.k_past, ks}, 0) : ks, v_all = P > 0 ? at::cat({s.v_past, vs}, 0) : vs;
    // GQA: query heads viewed as [kv head, group]. scores [Hkv, g, n, P + n]
    const at::Tensor qg = q.narrow(0, begin, n).view({n, Hkv, g, hd}).permute({1, 2, 0, 3});
    at::Tensor scores = at::matmul(qg, k_all.permute({1, 2, 0}).unsqueeze(1)) / std::sqrt(static_cast<double>(hd));
    at::Tensor m = s.mask;
    if (!m.defined()) {  // chain: fed row t sees the past and fed rows <= t
      m = at::zeros({n, P + n}, x.options());
      if (n > 1) m.narrow(1, P, n).copy_(at::full({n, n}, -std::numeric_limits<float>::infinity(), x.options()).triu(1));
    }
    const at::Tensor attn = at::softmax(scores + m, -1);
    outs.push_back(at::matmul(attn, v_all.permute({1, 0, 2}).unsqueeze(1))  // [Hkv, g, n, hd]
                       .permute({2, 0, 1, 3})
                       .reshape({n, H * hd}));
    begin += n;
  }
  SD_CHECK(begin == T, "eagle forward: slots cover ", begin, " of ", T, " rows (internal error)");
  const at::Tensor h = x + linear("wo", "", outs.size() == 1 ? outs[0] : at::cat(outs, 0));
  const at::Tensor hn = rms_norm_aten(h, p("ffn_norm"), cfg_.norm_eps);
  const at::Tensor mlp = linear("w_down", "", at::silu(linear("w_gate", "", hn)) * linear("w_up", "", hn));
  return {h + mlp, k, v};
}

at::Tensor DraftHead::medusa_forward(const at::Tensor& f) const {
  std::vector<at::Tensor> outs;
  for (int64_t i = 0; i < cfg_.n_medusa; ++i) {
    const std::string n = "medusa." + std::to_string(i);
    outs.push_back(f + at::silu(linear(n + ".weight", n + ".bias", f)));
  }
  return at::stack(outs);  // [n_medusa, N, d]
}

}  // namespace specdec::model
