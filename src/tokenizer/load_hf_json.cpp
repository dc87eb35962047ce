// Tokenizer::from_hf_json: builds the byte-level BPE from a Hugging Face tokenizer.json, plus
// tokenizer_config.json / chat_template.jinja next to it when present (BOS/EOS names, template).
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/json_limits.h"
#include "tokenizer/bpe_tokenizer.h"

namespace specdec::tokenizer {
namespace {

using nlohmann::json;

// A JSON node together with its key path, so every error names file and key.
struct Node {
  const json& j;
  std::string path;
  const std::string& file;

  Node at(const std::string& key) const {
    SD_CHECK(j.is_object() && j.contains(key), file, ": missing key '", path, ".", key, "'");
    return {j.at(key), path + "." + key, file};
  }
  bool has(const std::string& key) const { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }
  std::string str() const {
    SD_CHECK(j.is_string(), file, ": key '", path, "' must be a string, got ", j.dump().substr(0, 80));
    return j.get<std::string>();
  }
  int64_t integer() const {
    SD_CHECK(j.is_number_integer(), file, ": key '", path, "' must be an integer, got ", j.dump().substr(0, 80));
    return j.get<int64_t>();
  }
  bool boolean_or(const std::string& key, bool def) const {
    if (!has(key)) return def;
    Node n = at(key);
    SD_CHECK(n.j.is_boolean(), file, ": key '", n.path, "' must be true/false, got ", n.j.dump());
    return n.j.get<bool>();
  }
};

// Depth-limited (io::k_max_json_depth); errors name the file.
json read_json(const std::string& path) { return io::read_json_file(path); }

// The id table is dense: an id may not exceed the number of entries that could fill it (vocab
// plus added tokens), nor k_max_token_id, so a hostile id cannot make us allocate gigabytes.
void read_vocab(const Node& model, BpeSpec& spec, size_t n_added) {
  Node vocab = model.at("vocab");
  SD_CHECK(vocab.j.is_object(), spec.source, ": key '", vocab.path, "' must be an object");
  const int64_t bound = std::min<int64_t>(k_max_token_id + 1, int64_t(vocab.j.size() + n_added));
  for (auto it = vocab.j.begin(); it != vocab.j.end(); ++it) {
    int64_t id = Node{it.value(), vocab.path + "['" + it.key() + "']", spec.source}.integer();
    SD_CHECK(id >= 0 && id < bound, spec.source, ": key '", vocab.path, "['", it.key(), "']' has id ", id,
             ", outside [0, ", bound, ") (", vocab.j.size(), " vocab entries + ", n_added,
             " added tokens; at most ", k_max_token_id + 1, " ids)");
    if (id >= int64_t(spec.tokens.size())) spec.tokens.resize(size_t(id) + 1);
    spec.tokens[size_t(id)] = it.key();
  }
}

void read_merges(const Node& model, BpeSpec& spec) {
  Node merges = model.at("merges");
  SD_CHECK(merges.j.is_array(), spec.source, ": key '", merges.path, "' must be an array");
  for (size_t i = 0; i < merges.j.size(); ++i) {
    const json& m = merges.j[i];
    const std::string where = merges.path + "[" + std::to_string(i) + "]";
    if (m.is_string()) {  // older format: "left right"
      std::string s = m.get<std::string>();
      size_t sp = s.find(' ');
      SD_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), spec.source, ": key '",
               where, "' = '", s, "' is not 'left right'");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      SD_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), spec.source,
               ": key '", where, "' must be a pair of strings, got ", m.dump().substr(0, 80));
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
}

void read_added(const Node& root, BpeSpec& spec) {
  if (!root.has("added_tokens")) return;
  Node list = root.at("added_tokens");
  SD_CHECK(list.j.is_array(), spec.source, ": key 'added_tokens' must be an array");
  for (size_t i = 0; i < list.j.size(); ++i) {
    Node t{list.j[i], "added_tokens[" + std::to_string(i) + "]", spec.source};
    AddedToken a;
    const int64_t id = t.at("id").integer();
    SD_CHECK(id >= 0 && id <= k_max_token_id, spec.source, ": key 'added_tokens[", i, "].id' = ", id,
             " is outside [0, ", k_max_token_id, "]");
    a.id = TokenId(id);
    a.content = t.at("content").str();
    a.special = t.boolean_or("special", false);
    a.lstrip = t.boolean_or("lstrip", false);
    a.rstrip = t.boolean_or("rstrip", false);
    a.single_word = t.boolean_or("single_word", false);
    spec.added.push_back(a);
  }
}

SplitBehavior parse_behavior(const Node& n) {
  std::string b = n.str();
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  fail(n.file, ": key '", n.path, "' = '", b, "' is not a split behavior");
}

// Adds the steps of one HF pre_tokenizer node; returns whether a ByteLevel step was seen.
bool read_pre(const Node& n, PreTokenizer& pre) {
  const std::string type = n.at("type").str();
  auto regex = [&](const std::string& p, bool literal) {
    return std::make_shared<const Regex>(p, literal, n.file + ": " + n.path);
  };
  if (type == "Sequence") {
    Node list = n.at("pretokenizers");
    SD_CHECK(list.j.is_array(), n.file, ": key '", list.path, "' must be an array");
    bool byte_level = false;
    for (size_t i = 0; i < list.j.size(); ++i)
      byte_level |= read_pre({list.j[i], list.path + "[" + std::to_string(i) + "]", n.file}, pre);
    return byte_level;
  }
  SplitStep step;
  if (type == "ByteLevel") {
    if (n.boolean_or("use_regex", true)) step.regex = regex(kGpt2Pattern, false);
    step.add_prefix_space = n.boolean_or("add_prefix_space", false);
    pre.add(step);
    return true;
  }
  if (type == "Digits") {
    step.regex = regex(digit_pattern(n.boolean_or("individual_digits", false)), false);
    pre.add(step);
    return false;
  }
  if (type == "Split") {
    Node pattern = n.at("pattern");
    if (pattern.has("Regex")) step.regex = regex(pattern.at("Regex").str(), false);
    else step.regex = regex(pattern.at("String").str(), true);
    step.behavior = parse_behavior(n.at("behavior"));
    step.invert = n.boolean_or("invert", false);
    pre.add(step);
    return false;
  }
  fail(n.file, ": key '", n.path, ".type' = '", type,
       "' is not supported (ByteLevel, Split, Digits, Sequence)");
}

// BOS/EOS added by the post-processor (TemplateProcessing "single": [SpecialToken, $A, ...]).
void read_post(const Node& n, BpeSpec& spec, std::string& bos_name, std::string& eos_name) {
  const std::string type = n.at("type").str();
  if (type == "Sequence") {
    Node list = n.at("processors");
    SD_CHECK(list.j.is_array(), n.file, ": key '", list.path, "' must be an array");
    for (size_t i = 0; i < list.j.size(); ++i)
      read_post({list.j[i], list.path + "[" + std::to_string(i) + "]", n.file}, spec, bos_name, eos_name);
    return;
  }
  if (type != "TemplateProcessing") return;  // ByteLevel and friends do not add tokens
  Node single = n.at("single");
  SD_CHECK(single.j.is_array(), n.file, ": key '", single.path, "' must be an array");
  for (size_t i = 0; i < single.j.size(); ++i) {
    const json& item = single.j[i];
    if (!item.is_object() || !item.contains("SpecialToken")) continue;
    Node st{item.at("SpecialToken"), single.path + "[" + std::to_string(i) + "].SpecialToken", n.file};
    (i == 0 ? bos_name : eos_name) = st.at("id").str();
    (i == 0 ? spec.add_bos : spec.add_eos) = true;
  }
}

// tokenizer_config.json may give a token as "text" or {"content": "text"}.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return "";
}

std::string sibling(const std::string& path, const std::string& name) {
  size_t slash = path.find_last_of('/');
  return (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + name;
}

void read_config(const std::string& json_path, BpeSpec& spec, std::string& bos_name, std::string& eos_name) {
  std::string cfg_path = sibling(json_path, "tokenizer_config.json");
  if (std::ifstream(cfg_path).good()) {
    json cfg = read_json(cfg_path);
    if (bos_name.empty()) bos_name = config_token(cfg, "bos_token");
    if (eos_name.empty()) eos_name = config_token(cfg, "eos_token");
    if (cfg.contains("chat_template") && cfg.at("chat_template").is_string())
      spec.chat_template = cfg.at("chat_template").get<std::string>();
  }
  std::ifstream jinja(sibling(json_path, "chat_template.jinja"), std::ios::binary);
  if (jinja.good() && spec.chat_template.empty()) {
    std::stringstream ss;
    ss << jinja.rdbuf();
    spec.chat_template = ss.str();
  }
}

TokenId id_of(const BpeSpec& spec, const std::string& name) {
  if (name.empty()) return -1;
  for (const AddedToken& a : spec.added)
    if (a.content == name) return a.id;
  for (size_t id = 0; id < spec.tokens.size(); ++id)
    if (spec.tokens[id] == name) return TokenId(id);
  return -1;
}

}  // namespace

namespace {

std::shared_ptr<Tokenizer> load_hf_json(const std::string& tokenizer_json_path) {
  json doc = read_json(tokenizer_json_path);
  BpeSpec spec;
  spec.source = tokenizer_json_path;
  Node root{doc, "", spec.source};
  SD_CHECK(doc.is_object(), spec.source, ": top level must be a JSON object");
  Node model = root.at("model");
  std::string type = model.has("type") ? model.at("type").str() : "BPE";
  SD_CHECK(type == "BPE", spec.source, ": key '.model.type' = '", type, "' is not supported (only BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    SD_CHECK(!model.has(key) || model.at(key).str().empty(), spec.source, ": key '.model.", key,
             "' is not supported by byte-level BPE");
  const size_t n_added = root.has("added_tokens") && doc.at("added_tokens").is_array() ? doc.at("added_tokens").size() : 0;
  read_vocab(model, spec, n_added);
  read_merges(model, spec);
  spec.merges_key = ".model.merges";
  spec.ignore_merges = model.boolean_or("ignore_merges", false);
  read_added(root, spec);

  if (root.has("normalizer")) {
    std::string norm = root.at("normalizer").at("type").str();
    // NFC is left out (no Unicode tables here): it only changes text that is not already NFC.
    SD_CHECK(norm == "NFC", spec.source, ": key '.normalizer.type' = '", norm, "' is not supported");
    log::warn(spec.source, ": NFC normalizer ignored; input is assumed to be NFC already");
  }
  SD_CHECK(root.has("pre_tokenizer"), spec.source, ": missing key '.pre_tokenizer' (byte-level BPE needs ByteLevel)");
  SD_CHECK(read_pre(root.at("pre_tokenizer"), spec.pre), spec.source,
           ": key '.pre_tokenizer' has no ByteLevel step; only byte-level BPE is supported");

  std::string bos_name, eos_name;
  if (root.has("post_processor")) read_post(root.at("post_processor"), spec, bos_name, eos_name);
  read_config(tokenizer_json_path, spec, bos_name, eos_name);
  spec.bos = id_of(spec, bos_name);
  spec.eos = id_of(spec, eos_name);
  if (model.has("unk_token")) spec.unk = id_of(spec, model.at("unk_token").str());
  return std::make_shared<BpeTokenizer>(std::move(spec));
}

}  // namespace

std::shared_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& tokenizer_json_path) {
  try {
    return load_hf_json(tokenizer_json_path);
  } catch (const json::exception& e) {
    // Shapes we did not check explicitly still fail as specdec::Error naming the file.
    fail(tokenizer_json_path, ": unexpected tokenizer.json structure: ", e.what());
  }
}

}  // namespace specdec::tokenizer
