#include "harness/model_catalog.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "harness/paths.h"

namespace specdec::harness {

namespace fs = std::filesystem;

std::string repo_root() { return source_root(); }

std::string default_catalog_path() { return repo_root() + "/configs/models.yaml"; }

namespace {

std::string scalar(const YAML::Node& node, const std::string& where, const std::string& key,
                   bool required) {
  const YAML::Node v = node[key];
  if (!v) {
    if (required) fail(where, ".", key, ": missing (required)");
    return "";
  }
  if (!v.IsScalar()) fail(where, ".", key, ": expected a string");
  return v.as<std::string>();
}

ModelEntry parse_entry(const std::string& path, const std::string& name, const YAML::Node& node) {
  const std::string where = path + ": models." + name;
  if (!node.IsMap()) fail(where, ": expected a mapping");
  static const char* known[] = {"description", "file", "format", "packages", "member",
                                "sha256", "tokenizer_group", "expect"};
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) fail(where, ".", key, ": unknown key");
  }
  ModelEntry e;
  e.name = name;
  e.description = scalar(node, where, "description", false);
  e.file = scalar(node, where, "file", true);
  e.format = scalar(node, where, "format", true);
  if (e.format != "gguf" && e.format != "safetensors")
    fail(where, ".format: '", e.format, "' is not one of gguf, safetensors");
  e.sha256 = scalar(node, where, "sha256", false);
  e.member = scalar(node, where, "member", false);
  e.tokenizer_group = scalar(node, where, "tokenizer_group", false);
  if (const YAML::Node pk = node["packages"]) {
    if (!pk.IsSequence()) fail(where, ".packages: expected a list");
    for (const auto& p : pk) e.packages.push_back(p.as<std::string>());
  }
  return e;
}

}  // namespace

std::vector<ModelEntry> load_catalog(const std::string& path) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail(path, ": cannot open the model catalog");
  } catch (const YAML::DeepRecursion&) {  // yaml-cpp's parser guard (its message says "bad file")
    fail(path, ": YAML nested too deep");
  } catch (const YAML::Exception& e) {
    fail(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg);
  }
  const YAML::Node models = doc["models"];
  if (!models || !models.IsMap()) fail(path, ": expected a top-level 'models' mapping");
  std::vector<ModelEntry> out;
  for (const auto& kv : models) {
    out.push_back(parse_entry(path, kv.first.as<std::string>(), kv.second));
  }
  return out;
}

model::ModelSpec resolve_model(const std::string& name_or_path, const std::string& catalog_path) {
  model::ModelSpec spec;
  spec.name = name_or_path;
  if (name_or_path.rfind("tiny-", 0) == 0) {
    spec.path = name_or_path;
    return spec;
  }
  const auto catalog = load_catalog(catalog_path);
  for (const auto& e : catalog) {
    if (e.name != name_or_path) continue;
    spec.path = repo_root() + "/" + e.file;
    if (!fs::exists(spec.path))
      fail("model '", e.name, "': file ", spec.path, " is missing; run scripts/fetch_models.sh ", e.name);
    return spec;
  }
  if (fs::exists(name_or_path)) {
    spec.path = name_or_path;
    spec.name = fs::path(name_or_path).filename().string();
    return spec;
  }
  std::string names;
  for (const auto& e : catalog) names += (names.empty() ? "" : ", ") + e.name;
  fail("unknown model '", name_or_path, "': not a file or directory, and ", catalog_path,
       " names only: ", names, " (or tiny-llama, tiny-gpt2)");
}

}  // namespace specdec::harness
