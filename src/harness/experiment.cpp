// Experiment YAML parsing: the only place the experiment tree is a YAML node. Each section
// has one parse function taking (node, key path); errors go through Ctx::fail so every
// message carries the file, the key path and the offending value.
#include "harness/experiment.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harness/paths.h"
#include "io/json_limits.h"
#include "model/device.h"
#include "sampling/grammar.h"

namespace specdec::harness {
namespace {

namespace fs = std::filesystem;

// Values quoted in messages are cut: a hostile value may be megabytes long.
std::string clip(const std::string& text, size_t max = 80) {
  return text.size() <= max ? text : text.substr(0, max) + "... (" + std::to_string(text.size()) + " bytes)";
}

// Nesting depth and node count of a loaded tree, walked with an explicit stack (the tree may
// be as deep as yaml-cpp's own parser guard allows, and shared through aliases).
void check_yaml_shape(const YAML::Node& root, const std::string& what) {
  std::vector<std::pair<YAML::Node, int>> stack = {{root, 1}};
  int64_t n_nodes = 0;
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (++n_nodes > k_max_yaml_nodes)
      fail(what, ": more than ", k_max_yaml_nodes, " YAML nodes (aliases counted at every use)");
    if (depth > k_max_yaml_depth) fail(what, ": YAML nested deeper than ", k_max_yaml_depth, " levels");
    if (node.IsSequence()) {
      for (const auto& child : node) stack.push_back({child, depth + 1});
    } else if (node.IsMap()) {
      for (const auto& kv : node) {
        stack.push_back({kv.first, depth + 1});
        stack.push_back({kv.second, depth + 1});
      }
    }
  }
}

// YAML::Load with the depth limits: yaml-cpp's own guard (YAML::DeepRecursion) stops its
// recursive parser before the stack runs out, and check_yaml_shape applies ours.
YAML::Node load_yaml(const std::string& text, const std::string& what) {
  // YAML reads a lone CR as a line break, but yaml-cpp keeps one that ends a flow scalar
  // ("{name: x\r, seed: 1}" gives "x\r") and writes it back unquoted, where it does end the
  // line: the resolved config.yaml would read back as another experiment (found by
  // fuzz_experiment). Lone CRs become LFs first; CRLF stays as it is.
  std::string lf = text;
  for (size_t i = 0; i < lf.size(); ++i)
    if (lf[i] == '\r' && (i + 1 == lf.size() || lf[i + 1] != '\n')) lf[i] = '\n';
  YAML::Node root;
  try {
    root = YAML::Load(lf);
  } catch (const YAML::DeepRecursion&) {
    fail(what, ": YAML nested deeper than ", k_max_yaml_depth, " levels");
  } catch (const YAML::Exception& e) {
    fail(what, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg);
  }
  check_yaml_shape(root, what);
  return root;
}

// A non-negative decimal index as written in "--set key[3]=..."; -1 when it is not one.
int64_t parse_index(const std::string& text) {
  if (text.empty() || text.size() > 9) return -1;
  int64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return -1;
    v = v * 10 + (ch - '0');
  }
  return v;
}

// A YAML value as JSON (a json_schema written as YAML): quoted scalars stay strings, plain ones
// become null, booleans or numbers where they read as such.
nlohmann::json yaml_to_json(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[kv.first.Scalar()] = yaml_to_json(kv.second);
    return o;
  }
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& v : n) a.push_back(yaml_to_json(v));
    return a;
  }
  if (!n.IsScalar() || n.Tag() != "?") return n.IsScalar() ? nlohmann::json(n.Scalar()) : nlohmann::json();
  const std::string& v = n.Scalar();
  if (v == "null" || v == "~") return nullptr;
  if (v == "true" || v == "false") return v == "true";
  int64_t i = 0;
  if (YAML::convert<int64_t>::decode(n, i)) return i;
  double d = 0;
  if (YAML::convert<double>::decode(n, d)) return d;
  return v;
}

struct Ctx {
  std::string file;

  [[noreturn]] void bad(const std::string& path, const std::string& what) const {
    fail(file, ": ", path, ": ", what);
  }

  static std::string show(const YAML::Node& n) {
    if (!n || n.IsNull()) return "null";
    if (n.IsScalar()) return "'" + clip(n.Scalar()) + "'";
    YAML::Emitter e;
    e << YAML::Flow << n;
    return clip(e.c_str());
  }

  // A mapping key as text; a key that is itself a list or mapping is an error.
  std::string key(const YAML::Node& k, const std::string& path) const {
    if (!k.IsScalar()) bad(path.empty() ? "(top level)" : path, "keys must be strings, got " + show(k));
    return k.Scalar();
  }

  // Every map rejects keys outside its schema, listing the valid ones.
  void check_keys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& allowed) const {
    if (!n.IsMap()) bad(path.empty() ? "(top level)" : path, "expected a mapping, got " + show(n));
    for (const auto& kv : n) {
      const std::string key = this->key(kv.first, path);
      bool ok = false;
      for (const auto& a : allowed) ok = ok || a == key;
      if (ok) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      bad(join(path, key), "unknown key '" + key + "' (valid keys: " + list + ")");
    }
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  std::string str(const YAML::Node& n, const std::string& path) const {
    if (!n.IsScalar()) bad(path, "expected a string, got " + show(n));
    return n.Scalar();
  }
  int64_t integer(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) const {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) bad(path, "expected an integer, got " + show(n));
    if (v < lo || v > hi) bad(path, "value " + std::to_string(v) + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }
  double real(const YAML::Node& n, const std::string& path, double lo, double hi) const {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) bad(path, "expected a number, got " + show(n));
    if (!(v >= lo && v <= hi)) bad(path, "value " + n.Scalar() + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }
  bool boolean(const YAML::Node& n, const std::string& path) const {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) bad(path, "expected true or false, got " + show(n));
    return v;
  }
  std::vector<std::string> strings(const YAML::Node& n, const std::string& path) const {
    std::vector<std::string> out;
    if (n.IsScalar()) return {n.Scalar()};
    if (!n.IsSequence()) bad(path, "expected a string or a list of strings, got " + show(n));
    for (size_t i = 0; i < n.size(); ++i) out.push_back(str(n[i], path + "[" + std::to_string(i) + "]"));
    return out;
  }
};

ModelChoice parse_model(const Ctx& c, const YAML::Node& n, const std::string& path, const ModelChoice& defaults) {
  ModelChoice m = defaults;
  if (n.IsScalar()) {
    m.name = n.Scalar();
  } else {
    c.check_keys(n, path, {"name", "dtype", "threads", "seed", "device", "engine", "graphs"});
    if (!n["name"]) c.bad(path + ".name", "missing (a catalog name, a model path or tiny-llama)");
    m.name = c.str(n["name"], path + ".name");
    if (n["dtype"]) m.dtype = c.str(n["dtype"], path + ".dtype");
    if (n["threads"]) m.threads = static_cast<int>(c.integer(n["threads"], path + ".threads", 0, 1024));
    if (n["seed"]) m.seed = static_cast<uint64_t>(c.integer(n["seed"], path + ".seed", 0, INT64_MAX));
    if (n["device"]) m.device = c.str(n["device"], path + ".device");
    if (n["engine"]) m.engine = c.str(n["engine"], path + ".engine");
    if (n["graphs"]) m.graphs = c.str(n["graphs"], path + ".graphs");
  }
  if (m.name.empty()) c.bad(path, "empty model name");
  if (m.dtype != "auto" && m.dtype != "float32" && m.dtype != "bfloat16" && m.dtype != "native" &&
      m.dtype != "native_q8" && m.dtype != "q4_1")
    c.bad(path + ".dtype", "unknown dtype '" + m.dtype + "' (valid: auto, float32, bfloat16, native, native_q8, q4_1)");
  try {
    model::parse_device(m.device, path + ".device");
  } catch (const Error&) {
    c.bad(path + ".device", "unknown device '" + m.device + "' (valid: cpu, cuda, cuda:N)");
  }
  if (m.engine != "auto" && m.engine != "packed" && m.engine != "aten")
    c.bad(path + ".engine", "unknown engine '" + m.engine + "' (valid: auto, packed, aten)");
  if (m.graphs != "auto" && m.graphs != "on" && m.graphs != "off")
    c.bad(path + ".graphs", "unknown value '" + m.graphs + "' (valid: auto, on, off)");
  return m;
}

void parse_models(const Ctx& c, const YAML::Node& n, ExperimentConfig& cfg) {
  c.check_keys(n, "models", {"target", "draft", "dtype", "threads", "device", "engine", "graphs"});
  ModelChoice defaults;
  if (n["dtype"]) defaults.dtype = c.str(n["dtype"], "models.dtype");
  if (n["device"]) defaults.device = c.str(n["device"], "models.device");
  if (n["engine"]) defaults.engine = c.str(n["engine"], "models.engine");
  if (n["graphs"]) defaults.graphs = c.str(n["graphs"], "models.graphs");
  if (n["threads"]) defaults.threads = static_cast<int>(c.integer(n["threads"], "models.threads", 0, 1024));
  if (!n["target"]) c.bad("models.target", "missing");
  cfg.target = parse_model(c, n["target"], "models.target", defaults);
  if (n["draft"] && !n["draft"].IsNull()) cfg.draft = parse_model(c, n["draft"], "models.draft", defaults);
}

// A prompt's own constraint (PromptItem::constraint_params), parsed once here; an error names
// `where` (the file and the prompt) before the key and what is wrong with its value.
void parse_prompt_constraint(PromptItem& p, const std::string& where) {
  if (p.constraint_params.empty()) return;
  try {
    p.constraint = sampling::Constraint::from_params(p.constraint_params);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
}

PromptItem parse_prompt(const Ctx& c, const YAML::Node& n, const std::string& path, bool chat_default) {
  PromptItem p;
  p.chat = chat_default;
  if (n.IsScalar()) {
    p.text = n.Scalar();
  } else {
    c.check_keys(n, path, {"text", "turns", "chat", "category", "subcategory", "id", "json_schema", "regex",
                           "grammar", "response_format"});
    if (n["text"] && n["turns"]) c.bad(path, "both 'text' and 'turns' given (use one: turns = [first, follow-ups...])");
    if (!n["text"] && !n["turns"]) c.bad(path + ".text", "missing (give 'text' or 'turns')");
    if (n["text"]) {
      p.text = c.str(n["text"], path + ".text");
    } else {
      const YAML::Node t = n["turns"];
      if (!t.IsSequence() || t.size() == 0)
        c.bad(path + ".turns", "expected a non-empty list of strings, got " + Ctx::show(t));
      for (size_t i = 0; i < t.size(); ++i) {
        const std::string ti = path + ".turns[" + std::to_string(i) + "]";
        std::string turn = c.str(t[i], ti);
        if (turn.empty()) c.bad(ti, "empty turn");
        if (i == 0) {
          p.text = std::move(turn);
        } else {
          p.follow_ups.push_back(std::move(turn));
        }
      }
    }
    if (n["chat"]) p.chat = c.boolean(n["chat"], path + ".chat");
    if (n["category"]) p.category = c.str(n["category"], path + ".category");
    if (n["subcategory"]) p.subcategory = c.str(n["subcategory"], path + ".subcategory");
    if (n["id"]) p.id = c.str(n["id"], path + ".id");
    for (const std::string& key : sampling::Constraint::keys()) {
      if (!n[key]) continue;
      // json_schema may be written as YAML (a mapping), as in a strategy's params.
      p.constraint_params[key] = key == "json_schema" && (n[key].IsMap() || n[key].IsSequence())
                                     ? yaml_to_json(n[key]).dump()
                                     : c.str(n[key], path + "." + key);
    }
    parse_prompt_constraint(p, c.file + ": " + path);
  }
  if (p.text.empty()) c.bad(path, "empty prompt text");
  if (!p.follow_ups.empty() && !p.chat)
    c.bad(path, "follow-up turns need chat: true (each answer is fed back through the chat template); " +
                    std::to_string(p.follow_ups.size()) + " follow-up turn(s) with chat: false");
  return p;
}

// Spec-Bench's six groups (its paper's columns) from the fine categories of its question file.
// The one table of the mapping; nullptr for a category Spec-Bench does not have.
const char* spec_bench_group(const std::string& category) {
  static const std::pair<const char*, const char*> k_table[] = {
      {"writing", "multi_turn"},   {"roleplay", "multi_turn"},   {"reasoning", "multi_turn"},
      {"math", "multi_turn"},      {"coding", "multi_turn"},     {"extraction", "multi_turn"},
      {"stem", "multi_turn"},      {"humanities", "multi_turn"}, {"translation", "translation"},
      {"summarization", "summarization"}, {"qa", "qa"},          {"math_reasoning", "math_reasoning"},
      {"rag", "rag"},
  };
  for (const auto& [fine, group] : k_table)
    if (category == fine) return group;
  return nullptr;
}

std::string spec_bench_categories() {
  std::string list;
  for (const char* fine : {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
                           "translation", "summarization", "qa", "math_reasoning", "rag"})
    list += (list.empty() ? "" : ", ") + std::string(fine);
  return list;
}

// Categories in order of first appearance.
std::vector<std::string> categories_in_order(const std::vector<PromptItem>& prompts) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& p : prompts)
    if (seen.insert(p.category).second) out.push_back(p.category);
  return out;
}

// Uniform in [0, n), n >= 1, from the raw 64-bit output (std::uniform_int_distribution's
// algorithm is implementation-defined; mt19937_64's sequence is not): rejection of the top
// partial block, so unbiased.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // a multiple of n
  uint64_t x = 0;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

// prompts.per_category: n prompts of each category (categories in order of first appearance,
// one generator for all), chosen by a Fisher-Yates shuffle of the category's indices; the kept
// prompts stay in file order. n = 0 keeps everything.
std::vector<PromptItem> keep_per_category(std::vector<PromptItem> prompts, int64_t n, uint64_t seed) {
  if (n <= 0) return prompts;
  std::mt19937_64 rng(seed);
  std::vector<bool> keep(prompts.size(), false);
  for (const auto& cat : categories_in_order(prompts)) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < prompts.size(); ++i)
      if (prompts[i].category == cat) idx.push_back(i);
    if (static_cast<int64_t>(idx.size()) > n) {
      for (size_t i = idx.size() - 1; i > 0; --i) std::swap(idx[i], idx[uniform_below(rng, i + 1)]);
      idx.resize(static_cast<size_t>(n));
    }
    for (size_t i : idx) keep[i] = true;
  }
  std::vector<PromptItem> out;
  for (size_t i = 0; i < prompts.size(); ++i)
    if (keep[i]) out.push_back(std::move(prompts[i]));
  return out;
}

// prompts.range "A:B" -> [A, B) (B = -1: to the end). YAML reads `40:` as the mapping
// {40: null}; that form is taken as "40:" too.
struct PromptRange {
  int64_t lo = 0;
  int64_t hi = -1;  // -1: to the end
  std::string text;
};

PromptRange parse_range(const Ctx& c, const YAML::Node& n) {
  std::string text;
  if (n.IsMap() && n.size() == 1 && n.begin()->first.IsScalar() && n.begin()->second.IsNull()) {
    text = n.begin()->first.Scalar() + ":";
  } else if (n.IsScalar()) {
    text = n.Scalar();
  } else {
    c.bad("prompts.range", "expected \"A:B\" (prompts A to B-1, 0-based; \"A:\" to the end), got " + Ctx::show(n));
  }
  const auto colon = text.find(':');
  const std::string a = colon == std::string::npos ? text : text.substr(0, colon);
  const std::string b = colon == std::string::npos ? "" : text.substr(colon + 1);
  const int64_t lo = a.empty() ? 0 : parse_index(a);
  const int64_t hi = b.empty() ? -1 : parse_index(b);
  if (colon == std::string::npos || lo < 0 || (!b.empty() && hi < 0))
    c.bad("prompts.range", "'" + clip(text) + "' is not a range \"A:B\" (0-based, B exclusive; \"A:\" to the end)");
  if (hi >= 0 && hi <= lo) c.bad("prompts.range", "'" + clip(text) + "' is an empty range (need A < B)");
  return {lo, hi, text};
}

void parse_prompts(const Ctx& c, const YAML::Node& n, ExperimentConfig& cfg) {
  bool chat = false;
  int64_t limit = 0;
  int64_t turns = 0;  // keep at most this many turns of each prompt (0: all)
  YAML::Node inline_list;
  std::string groups;
  int64_t per_category = 0;
  uint64_t seed = 0;
  std::vector<std::string> categories;
  std::optional<PromptRange> range;
  if (n.IsSequence()) {
    inline_list.reset(n);
  } else {
    c.check_keys(n, "prompts",
                 {"file", "inline", "chat", "groups", "per_category", "seed", "categories", "range", "limit",
                  "turns"});
    if (n["chat"]) chat = c.boolean(n["chat"], "prompts.chat");
    if (n["limit"]) limit = c.integer(n["limit"], "prompts.limit", 0, 1000000);
    if (n["turns"]) turns = c.integer(n["turns"], "prompts.turns", 1, 1000000);
    if (n["groups"]) {
      groups = c.str(n["groups"], "prompts.groups");
      if (groups != "spec_bench")
        c.bad("prompts.groups", "unknown grouping '" + clip(groups) + "' (valid: spec_bench)");
    }
    if (n["per_category"]) per_category = c.integer(n["per_category"], "prompts.per_category", 0, 1000000);
    if (n["seed"]) seed = static_cast<uint64_t>(c.integer(n["seed"], "prompts.seed", 0, INT64_MAX));
    if (n["categories"]) {
      categories = c.strings(n["categories"], "prompts.categories");
      if (categories.empty()) c.bad("prompts.categories", "empty list (omit the key to keep every category)");
    }
    if (n["range"]) range = parse_range(c, n["range"]);
    if (n["inline"]) inline_list.reset(n["inline"]);
    if (n["file"]) {
      cfg.prompts_file = c.str(n["file"], "prompts.file");
      const std::string path = resolve_data_path(cfg.prompts_file, c.file);
      std::error_code ec;  // exists() without ec throws on a name the OS refuses (too long)
      if (!fs::exists(path, ec)) c.bad("prompts.file", "file '" + clip(cfg.prompts_file) + "' not found");
      for (auto& p : load_prompts_jsonl(path, chat)) cfg.prompts.push_back(std::move(p));
    }
  }
  if (inline_list && !inline_list.IsNull()) {
    if (!inline_list.IsSequence()) c.bad("prompts.inline", "expected a list, got " + Ctx::show(inline_list));
    for (size_t i = 0; i < inline_list.size(); ++i)
      cfg.prompts.push_back(parse_prompt(c, inline_list[i], "prompts[" + std::to_string(i) + "]", chat));
  }
  // Ids before any selection, so a prompt keeps its id in every shard.
  for (size_t i = 0; i < cfg.prompts.size(); ++i)
    if (cfg.prompts[i].id.empty()) cfg.prompts[i].id = "p" + std::to_string(i);
  // Selection: groups -> per_category -> categories -> range -> limit.
  if (groups == "spec_bench") {
    for (auto& p : cfg.prompts) {
      const char* group = spec_bench_group(p.category);
      if (!group)
        c.bad("prompts.groups", "prompt '" + clip(p.id) + "' has category '" + clip(p.category) +
                                    "', which spec_bench does not map (known: " + spec_bench_categories() + ")");
      p.subcategory = p.category;
      p.category = group;
    }
  }
  cfg.prompts = keep_per_category(std::move(cfg.prompts), per_category, seed);
  if (!categories.empty()) {
    const auto present = categories_in_order(cfg.prompts);
    for (const auto& want : categories) {
      if (std::find(present.begin(), present.end(), want) != present.end()) continue;
      std::string list;
      for (const auto& p : present) list += (list.empty() ? "" : ", ") + p;
      c.bad("prompts.categories", "unknown category '" + clip(want) + "' (categories present: " + list + ")");
    }
    std::vector<PromptItem> kept;
    for (auto& p : cfg.prompts)
      if (std::find(categories.begin(), categories.end(), p.category) != categories.end()) kept.push_back(std::move(p));
    cfg.prompts = std::move(kept);
  }
  if (range) {
    const int64_t size = static_cast<int64_t>(cfg.prompts.size());
    if (range->lo >= size)
      c.bad("prompts.range", "'" + clip(range->text) + "' selects no prompts (" + std::to_string(size) +
                                 " selected before the range)");
    const int64_t end = range->hi < 0 ? size : std::min(range->hi, size);
    cfg.prompts = std::vector<PromptItem>(std::make_move_iterator(cfg.prompts.begin() + range->lo),
                                          std::make_move_iterator(cfg.prompts.begin() + end));
  }
  if (limit > 0 && static_cast<int64_t>(cfg.prompts.size()) > limit) cfg.prompts.resize(static_cast<size_t>(limit));
  for (auto& p : cfg.prompts)
    if (turns > 0 && static_cast<int64_t>(p.follow_ups.size()) >= turns)
      p.follow_ups.resize(static_cast<size_t>(turns - 1));
  if (cfg.prompts.empty()) c.bad("prompts", "no prompts (give a list, prompts.inline or prompts.file)");
}

void parse_strategies(const Ctx& c, const YAML::Node& n, ExperimentConfig& cfg) {
  if (!n.IsSequence() || n.size() == 0) c.bad("strategies", "expected a non-empty list, got " + Ctx::show(n));
  std::set<std::string> labels;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string path = "strategies[" + std::to_string(i) + "]";
    StrategyEntry s;
    if (n[i].IsScalar()) {
      s.name = n[i].Scalar();
    } else {
      c.check_keys(n[i], path, {"name", "label", "params", "trace"});
      if (!n[i]["name"]) c.bad(path + ".name", "missing");
      s.name = c.str(n[i]["name"], path + ".name");
      if (n[i]["label"]) s.label = c.str(n[i]["label"], path + ".label");
      if (n[i]["trace"]) s.trace = c.boolean(n[i]["trace"], path + ".trace");
      if (const auto p = n[i]["params"]) {
        if (!p.IsMap()) c.bad(path + ".params", "expected a mapping, got " + Ctx::show(p));
        for (const auto& kv : p) {
          const std::string key = c.key(kv.first, path + ".params");
          // json_schema may be written as YAML (a mapping): it goes on as JSON text.
          s.params[key] = key == "json_schema" && (kv.second.IsMap() || kv.second.IsSequence())
                              ? yaml_to_json(kv.second).dump()
                              : c.str(kv.second, path + ".params." + key);
        }
      }
    }
    if (s.label.empty()) s.label = s.name;
    if (!labels.insert(s.label).second)
      c.bad(path + ".label", "duplicate label '" + s.label + "' (give each entry a distinct label)");
    cfg.strategies.push_back(std::move(s));
  }
}

void parse_sweep(const Ctx& c, const YAML::Node& n, ExperimentConfig& cfg) {
  if (n.IsNull()) return;
  if (!n.IsMap()) c.bad("sweep", "expected a mapping of parameter -> list of values, got " + Ctx::show(n));
  for (const auto& kv : n) {
    SweepAxis axis;
    axis.key = c.key(kv.first, "sweep");
    const std::string path = "sweep." + axis.key;
    axis.values = c.strings(kv.second, path);
    if (axis.values.empty()) c.bad(path, "empty list of values");
    std::set<std::string> seen;
    for (const auto& v : axis.values)
      if (!seen.insert(v).second) c.bad(path, "duplicate value '" + v + "'");
    cfg.sweep.push_back(std::move(axis));
  }
}

void parse_checks(const Ctx& c, const YAML::Node& n, ChecksConfig& k) {
  c.check_keys(n, "checks", {"greedy_equality", "first_token", "sequence", "significance", "strategies",
                             "sampling_where", "inject_residual_bug", "batch_size", "valid"});
  if (n["greedy_equality"]) k.greedy_equality = c.boolean(n["greedy_equality"], "checks.greedy_equality");
  if (const auto f = n["first_token"]) {
    if (f.IsScalar()) {
      k.first_token = c.boolean(f, "checks.first_token");
    } else {
      c.check_keys(f, "checks.first_token", {"enabled", "samples", "top_k"});
      if (f["enabled"]) k.first_token = c.boolean(f["enabled"], "checks.first_token.enabled");
      if (f["samples"]) k.first_token_samples = c.integer(f["samples"], "checks.first_token.samples", 10, 10000000);
      if (f["top_k"]) k.first_token_top_k = c.integer(f["top_k"], "checks.first_token.top_k", 1, 1000);
    }
  }
  if (const auto s = n["sequence"]) {
    if (s.IsScalar()) {
      k.sequence = c.boolean(s, "checks.sequence");
    } else {
      c.check_keys(s, "checks.sequence", {"enabled", "samples", "length"});
      if (s["enabled"]) k.sequence = c.boolean(s["enabled"], "checks.sequence.enabled");
      if (s["samples"]) k.sequence_samples = c.integer(s["samples"], "checks.sequence.samples", 10, 10000000);
      if (s["length"]) k.sequence_length = c.integer(s["length"], "checks.sequence.length", 1, 4096);
    }
  }
  if (n["significance"]) k.significance = c.real(n["significance"], "checks.significance", 1e-12, 0.5);
  if (n["strategies"]) k.strategies = c.strings(n["strategies"], "checks.strategies");
  if (const auto w = n["sampling_where"]) {
    if (!w.IsMap()) c.bad("checks.sampling_where", "expected a map of parameter: [values], got " + c.show(w));
    for (const auto& kv : w) {
      const std::string key = c.key(kv.first, "checks.sampling_where");
      k.sampling_where[key] = c.strings(kv.second, "checks.sampling_where." + key);
    }
  }
  if (n["inject_residual_bug"]) k.inject_residual_bug = c.boolean(n["inject_residual_bug"], "checks.inject_residual_bug");
  if (n["batch_size"]) k.batch_size = c.integer(n["batch_size"], "checks.batch_size", 1, k_max_batch_size);
  if (n["valid"]) k.valid = c.boolean(n["valid"], "checks.valid");
}

// report: {context: path}: resolved like prompts.file; kept as written (like prompts.file), so
// the resolved config, compared on --resume, is the same on every machine and checkout.
void parse_report(const Ctx& c, const YAML::Node& n, ExperimentConfig& cfg) {
  c.check_keys(n, "report", {"context"});
  if (!n["context"]) return;
  const std::string as_written = c.str(n["context"], "report.context");
  if (as_written.empty()) c.bad("report.context", "empty path");
  const std::string path = resolve_data_path(as_written, c.file);
  std::error_code ec;  // exists() without ec throws on a name the OS refuses (too long)
  if (!fs::exists(path, ec)) c.bad("report.context", "file '" + clip(as_written) + "' not found");
  if (fs::is_directory(path, ec))
    c.bad("report.context", "'" + clip(as_written) + "' is a directory, expected a markdown file");
  cfg.report_context = as_written;
}

// "a.b[2].c=value": walks (creating maps as needed) and sets the node to YAML::Load(value).
void apply_override(const Ctx& c, YAML::Node root, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) fail("--set '", clip(text), "': expected key.path=value");
  const std::string path = text.substr(0, eq);
  const YAML::Node value = load_yaml(text.substr(eq + 1), "--set '" + clip(text) + "': value");
  YAML::Node cur = root;
  std::stringstream ss(path);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string key = parts[i];
    int64_t index = -1;
    const auto br = key.find('[');
    if (br != std::string::npos) {
      if (key.back() != ']') fail("--set '", clip(text), "': bad index in '", key, "'");
      index = parse_index(key.substr(br + 1, key.size() - br - 2));
      if (index < 0) fail("--set '", clip(text), "': bad index in '", key, "' (expected [0], [1], ...)");
      key = key.substr(0, br);
    }
    if (key.empty()) fail("--set '", clip(text), "': empty key in path '", clip(path), "'");
    if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap())
      fail("--set '", clip(text), "': cannot set key '", key, "' inside ", Ctx::show(cur), ", which is not a mapping");
    const bool last = i + 1 == parts.size();
    YAML::Node next = cur[key];
    if (index >= 0) {
      if (!next.IsSequence() || index >= static_cast<int64_t>(next.size()))
        fail("--set '", clip(text), "': ", key, " has no element [", index, "]");
      YAML::Node elem = next[static_cast<size_t>(index)];
      next.reset(elem);
    }
    if (last) {
      if (index >= 0) {
        cur[key][static_cast<size_t>(index)] = value;
      } else {
        cur[key] = value;
      }
    } else {
      cur.reset(next);
    }
  }
  (void)c;
}

ExperimentConfig parse_tree(const std::string& yaml_text, const std::string& file,
                            const std::vector<std::string>& overrides);

}  // namespace

std::vector<PromptItem> load_prompts_jsonl(const std::string& path, bool chat_default) {
  std::error_code ec;  // is_directory() without ec throws on a name the OS refuses (too long)
  SD_CHECK(!fs::is_directory(path, ec), "prompts file '", path, "' is a directory, expected a JSONL file");
  std::ifstream in(path);
  SD_CHECK(in, "cannot open prompts file '", path, "'");
  std::vector<PromptItem> out;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    io::check_json_depth(line, where);  // nesting limit before the parser sees it
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail(where, ": not valid JSON: ", e.what());
    }
    SD_CHECK(j.is_object(), where, ": expected an object with a string field \"text\" or a list \"turns\", got ",
             clip(j.dump()));
    const bool has_text = j.contains("text"), has_turns = j.contains("turns");
    SD_CHECK(!(has_text && has_turns), where, ": both \"text\" and \"turns\" given (use one)");
    SD_CHECK(has_text || has_turns, where, ": expected an object with a string field \"text\" or a list \"turns\"");
    PromptItem p;
    p.chat = chat_default;
    if (has_text) {
      SD_CHECK(j["text"].is_string(), where, ": \"text\" must be a string, got ", clip(j["text"].dump()));
      p.text = j["text"].get<std::string>();
      SD_CHECK(!p.text.empty(), where, ": empty \"text\"");
    } else {
      const auto& turns = j["turns"];
      SD_CHECK(turns.is_array() && !turns.empty(), where, ": \"turns\" must be a non-empty list of strings, got ",
               clip(turns.dump()));
      for (size_t i = 0; i < turns.size(); ++i) {
        SD_CHECK(turns[i].is_string() && !turns[i].get_ref<const std::string&>().empty(), where, ": \"turns\"[", i,
                 "] must be a non-empty string, got ", clip(turns[i].dump()));
        if (i == 0) {
          p.text = turns[i].get<std::string>();
        } else {
          p.follow_ups.push_back(turns[i].get<std::string>());
        }
      }
    }
    if (j.contains("chat")) {
      SD_CHECK(j["chat"].is_boolean(), where, ": \"chat\" must be true or false, got ", clip(j["chat"].dump()));
      p.chat = j["chat"].get<bool>();
    }
    SD_CHECK(p.follow_ups.empty() || p.chat, where, ": follow-up turns need chat: true (each answer is fed back ",
             "through the chat template); set \"chat\": true on the line or prompts.chat: true");
    if (j.contains("category")) {
      SD_CHECK(j["category"].is_string(), where, ": \"category\" must be a string, got ", clip(j["category"].dump()));
      p.category = j["category"].get<std::string>();
    }
    SD_CHECK(!(j.contains("id") && j.contains("question_id")), where,
             ": both \"id\" and \"question_id\" given (use one)");
    for (const char* key : {"id", "question_id"}) {
      if (!j.contains(key)) continue;
      const auto& v = j[key];
      SD_CHECK(v.is_string() || v.is_number_integer(), where, ": \"", key, "\" must be a string or an integer, got ",
               clip(v.dump()));
      p.id = v.is_string() ? v.get<std::string>() : v.dump();
    }
    const std::string prompt = where + ": prompt " + std::to_string(out.size());
    for (const std::string& key : sampling::Constraint::keys()) {
      if (!j.contains(key)) continue;
      const auto& v = j[key];
      // json_schema may be an object (the schema itself); every value else is a string.
      SD_CHECK(v.is_string() || (key == "json_schema" && v.is_object()), prompt, ": ", key, ": expected a string",
               key == "json_schema" ? " or an object" : "", ", got ", clip(v.dump()));
      p.constraint_params[key] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    parse_prompt_constraint(p, prompt);
    out.push_back(std::move(p));
  }
  return out;
}

ExperimentConfig parse_experiment(const std::string& yaml_text, const std::string& file,
                                  const std::vector<std::string>& overrides) {
  try {
    return parse_tree(yaml_text, file, overrides);
  } catch (const YAML::Exception& e) {  // a node access we did not guard: still name the file
    fail(file, ": ", e.what());
  }
}

namespace {

ExperimentConfig parse_tree(const std::string& yaml_text, const std::string& file,
                            const std::vector<std::string>& overrides) {
  const Ctx c{file};
  YAML::Node root = load_yaml(yaml_text, file);
  if (!root || root.IsNull()) fail(file, ": empty experiment file");
  for (const auto& o : overrides) apply_override(c, root, o);
  check_yaml_shape(root, file + " (after --set)");
  c.check_keys(root, "", {"name", "description", "models", "prompts", "interleave", "strategies", "sweep", "repeats",
                          "warmup", "seed", "max_new_tokens", "stop", "eos", "timeout_s", "plots", "report", "checks",
                          "batch_size"});
  ExperimentConfig cfg;
  cfg.file = file;
  if (root["name"]) {
    cfg.name = c.str(root["name"], "name");
    check_experiment_name(cfg.name, file + ": name");
  } else {
    cfg.name = fs::path(file).stem().string();
    check_experiment_name(cfg.name, file + ": name (from the file name; set 'name:')");
  }
  if (root["description"]) cfg.description = c.str(root["description"], "description");
  if (!root["models"]) c.bad("models", "missing (models.target is required)");
  parse_models(c, root["models"], cfg);
  if (!root["prompts"]) c.bad("prompts", "missing");
  parse_prompts(c, root["prompts"], cfg);
  if (root["interleave"]) {
    cfg.interleave = c.str(root["interleave"], "interleave");
    if (cfg.interleave != "cell" && cfg.interleave != "prompt")
      c.bad("interleave", "unknown value '" + clip(cfg.interleave) + "' (valid: cell, prompt)");
  }
  if (!root["strategies"]) c.bad("strategies", "missing");
  parse_strategies(c, root["strategies"], cfg);
  if (root["sweep"]) parse_sweep(c, root["sweep"], cfg);
  if (root["repeats"]) cfg.repeats = c.integer(root["repeats"], "repeats", 1, 1000);
  if (root["warmup"]) cfg.warmup = c.integer(root["warmup"], "warmup", 0, 1000);
  if (root["seed"]) cfg.seed = static_cast<uint64_t>(c.integer(root["seed"], "seed", 0, INT64_MAX));
  if (root["max_new_tokens"]) cfg.max_new_tokens = c.integer(root["max_new_tokens"], "max_new_tokens", 1, 1 << 20);
  if (root["batch_size"]) cfg.batch_size = c.integer(root["batch_size"], "batch_size", 1, k_max_batch_size);
  if (root["stop"]) cfg.stop = c.strings(root["stop"], "stop");
  if (root["eos"]) cfg.eos = c.boolean(root["eos"], "eos");
  if (root["timeout_s"]) cfg.timeout_s = c.real(root["timeout_s"], "timeout_s", 0, 1e9);
  if (root["plots"]) cfg.plots = c.boolean(root["plots"], "plots");
  if (root["report"]) parse_report(c, root["report"], cfg);
  if (root["checks"]) parse_checks(c, root["checks"], cfg.checks);
  return cfg;
}

}  // namespace

void check_experiment_name(const std::string& name, const std::string& where) {
  SD_CHECK(!name.empty() && name.size() <= 128, where, ": '", clip(name), "' must be 1 to 128 characters (it names a folder)");
  SD_CHECK(name != "." && name != "..", where, ": '", name, "' is not allowed (it names a folder under the results root)");
  for (char ch : name)
    SD_CHECK(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.', where, ": '",
             clip(name), "' may only contain letters, digits, '_', '-', '.' (it names a folder)");
}

ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;  // is_directory() without ec throws on a name the OS refuses (too long)
  SD_CHECK(!fs::is_directory(path, ec), "experiment file '", path, "' is a directory, expected a YAML file");
  std::ifstream in(path);
  SD_CHECK(in, "cannot open experiment file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_experiment(ss.str(), path, overrides);
}

namespace {
void emit_model(YAML::Emitter& e, const ModelChoice& m) {
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << m.name << YAML::Key << "dtype" << YAML::Value
    << m.dtype << YAML::Key << "threads" << YAML::Value << m.threads << YAML::Key << "seed" << YAML::Value << m.seed
    << YAML::Key << "device" << YAML::Value << m.device << YAML::Key << "engine" << YAML::Value << m.engine << YAML::Key << "graphs" << YAML::Value << m.graphs
    << YAML::EndMap;
}
}  // namespace

std::string to_yaml(const ExperimentConfig& cfg) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << cfg.name;
  e << YAML::Key << "description" << YAML::Value << cfg.description;
  e << YAML::Key << "models" << YAML::Value << YAML::BeginMap << YAML::Key << "target" << YAML::Value;
  emit_model(e, cfg.target);
  if (cfg.draft) {
    e << YAML::Key << "draft" << YAML::Value;
    emit_model(e, *cfg.draft);
  }
  e << YAML::EndMap;
  e << YAML::Key << "prompts" << YAML::Value << YAML::BeginSeq;
  for (const auto& p : cfg.prompts) {
    // A prompt with follow-up turns is written in the `turns` form; subcategory only when set,
    // so configs without either keep their old resolved text (and --resume keeps working).
    e << YAML::BeginMap << YAML::Key << "id" << YAML::Value << p.id;
    if (p.follow_ups.empty()) {
      e << YAML::Key << "text" << YAML::Value << p.text;
    } else {
      e << YAML::Key << "turns" << YAML::Value << YAML::BeginSeq << p.text;
      for (const auto& f : p.follow_ups) e << f;
      e << YAML::EndSeq;
    }
    e << YAML::Key << "chat" << YAML::Value << p.chat << YAML::Key << "category" << YAML::Value << p.category;
    if (!p.subcategory.empty()) e << YAML::Key << "subcategory" << YAML::Value << p.subcategory;
    for (const auto& [k, v] : p.constraint_params) e << YAML::Key << k << YAML::Value << v;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  if (cfg.interleave != "cell") e << YAML::Key << "interleave" << YAML::Value << cfg.interleave;
  e << YAML::Key << "strategies" << YAML::Value << YAML::BeginSeq;
  for (const auto& s : cfg.strategies) {
    e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << s.name << YAML::Key << "label" << YAML::Value
      << s.label << YAML::Key << "params" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : s.params) e << YAML::Key << k << YAML::Value << v;
    e << YAML::EndMap;
    if (s.trace) e << YAML::Key << "trace" << YAML::Value << true;  // absent when off: older runs resume
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "sweep" << YAML::Value << YAML::BeginMap;
  for (const auto& a : cfg.sweep) e << YAML::Key << a.key << YAML::Value << YAML::Flow << a.values;
  e << YAML::EndMap;
  e << YAML::Key << "repeats" << YAML::Value << cfg.repeats << YAML::Key << "warmup" << YAML::Value << cfg.warmup
    << YAML::Key << "seed" << YAML::Value << cfg.seed << YAML::Key << "max_new_tokens" << YAML::Value
    << cfg.max_new_tokens << YAML::Key << "stop" << YAML::Value << YAML::Flow << cfg.stop << YAML::Key << "eos"
    << YAML::Value << cfg.eos << YAML::Key << "timeout_s" << YAML::Value << cfg.timeout_s << YAML::Key << "plots"
    << YAML::Value << cfg.plots;
  // Written only when set, so runs from before the key resume.
  if (cfg.batch_size != 1) e << YAML::Key << "batch_size" << YAML::Value << cfg.batch_size;
  if (!cfg.report_context.empty())
    e << YAML::Key << "report" << YAML::Value << YAML::BeginMap << YAML::Key << "context" << YAML::Value
      << cfg.report_context << YAML::EndMap;
  const auto& k = cfg.checks;
  e << YAML::Key << "checks" << YAML::Value << YAML::BeginMap << YAML::Key << "greedy_equality" << YAML::Value
    << k.greedy_equality << YAML::Key << "first_token" << YAML::Value << YAML::BeginMap << YAML::Key << "enabled"
    << YAML::Value << k.first_token << YAML::Key << "samples" << YAML::Value << k.first_token_samples << YAML::Key
    << "top_k" << YAML::Value << k.first_token_top_k << YAML::EndMap << YAML::Key << "sequence" << YAML::Value
    << YAML::BeginMap << YAML::Key << "enabled" << YAML::Value << k.sequence << YAML::Key << "samples" << YAML::Value
    << k.sequence_samples << YAML::Key << "length" << YAML::Value << k.sequence_length << YAML::EndMap << YAML::Key
    << "significance" << YAML::Value << k.significance << YAML::Key << "strategies" << YAML::Value << YAML::Flow
    << k.strategies << YAML::Key << "sampling_where" << YAML::Value << YAML::Flow << k.sampling_where
    << YAML::Key << "inject_residual_bug" << YAML::Value << k.inject_residual_bug;
  if (k.batch_size != ChecksConfig{}.batch_size) e << YAML::Key << "batch_size" << YAML::Value << k.batch_size;
  if (k.valid) e << YAML::Key << "valid" << YAML::Value << true;  // absent when off: older runs resume
  e << YAML::EndMap;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace specdec::harness
