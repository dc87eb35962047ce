#pragma once
// configs/models.yaml: the named models, the PyPI packages their weights come from,
// how they are reassembled, and their sha256. The CLI and experiments name models here.
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace specdec::harness {

struct ModelEntry {
  std::string name;                   // e.g. "smollm2-135m"
  std::string description;
  std::string file;                   // path relative to the repository root (models/...)
  std::string format;                 // "gguf" | "safetensors"
  std::string sha256;                 // of the reassembled file
  std::vector<std::string> packages;  // pip requirement strings, in part order
  std::string member;                 // file inside each wheel to take ("largest" or a path)
  std::string tokenizer_group;        // models sharing a tokenizer share this tag
};

// Repository root: $SPECDEC_ROOT if set, else the source dir the binary was built from.
std::string repo_root();
std::string default_catalog_path();  // <root>/configs/models.yaml

// Parses the catalog; errors name the file, key path and value.
std::vector<ModelEntry> load_catalog(const std::string& path = default_catalog_path());

// A catalog name, a path to a .gguf file or HF directory, or "tiny-llama"/"tiny-gpt2".
// A catalog model whose file is missing is an error telling which fetch command to run.
model::ModelSpec resolve_model(const std::string& name_or_path,
                               const std::string& catalog_path = default_catalog_path());

}  // namespace specdec::harness
