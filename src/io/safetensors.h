#pragma once
// Hugging Face safetensors reader: a single model.safetensors file or a sharded
// checkpoint described by model.safetensors.index.json, plus config.json.
// Memory-mapped; nothing here depends on LibTorch. Malformed input throws
// specdec::Error naming the file, the tensor and what was expected.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace specdec::io {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;   // PyTorch order
  uint64_t begin = 0, end = 0;  // byte range relative to the data section
  int64_t n_elements() const;
};

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  static std::shared_ptr<SafetensorsFile> parse(const uint8_t* data, size_t size, const std::string& name);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensorInfo* find(const std::string& name) const;
  // Converts F32/F16/BF16 (and F64) to fp32 into out[n_elements()].
  void read_f32(const SafetensorsTensorInfo& t, float* out) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  const uint8_t* data_ = nullptr;  // start of the data section
  size_t data_size_ = 0;
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// A Hugging Face model directory: config.json, tokenizer.json and one or more
// safetensors shards. Tensor names are the checkpoint's (e.g. model.layers.0.mlp.up_proj.weight).
class SafetensorsModel {
 public:
  static std::shared_ptr<SafetensorsModel> open_dir(const std::string& dir);
  const std::string& dir() const { return dir_; }
  std::vector<std::string> tensor_names() const;
  const SafetensorsTensorInfo* find(const std::string& name) const;
  void read_f32(const std::string& name, float* out) const;
  std::string config_json_path() const { return dir_ + "/config.json"; }
  std::string tokenizer_json_path() const { return dir_ + "/tokenizer.json"; }

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> shard index
};

// One float32 tensor to write: `shape` in PyTorch order, data[product(shape)] row-major.
struct SafetensorsF32 {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};
// Writes the tensors (as F32) and string metadata as one safetensors file that
// SafetensorsFile reads back (and Hugging Face's safetensors loads). Atomic: the file is
// written beside `path` and renamed over it, so a run killed meanwhile leaves the old file.
// Throws specdec::Error naming the file when it cannot be written.
void write_safetensors(const std::string& path, const std::vector<SafetensorsF32>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace specdec::io
