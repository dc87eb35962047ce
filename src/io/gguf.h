#pragma once
// GGUF v2/v3 reader (llama.cpp's single-file model format): header, metadata key/values,
// tensor table with alignment, and dequantisation of every supported quant type to fp32.
// The file is memory-mapped; nothing here depends on LibTorch.
//
// Every malformed input (truncated file, bad magic/version, out-of-range offsets,
// unknown value or quant type) throws specdec::Error naming the file, the byte offset
// or tensor, and what was expected. It never reads out of bounds.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace specdec::io {

// ggml tensor types (values as in ggml.h / the GGUF spec).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30,
};
const char* ggml_type_name(GgmlType t);  // "Q4_K", or "unknown"

// One metadata value. Arrays hold their elements in `array`.
struct GgufValue {
  enum class Kind { u8, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
  Kind kind = Kind::u32;
  int64_t i = 0;       // all integer kinds and bool
  uint64_t u = 0;      // u64 without loss
  double f = 0;        // f32/f64
  std::string s;       // string
  std::vector<GgufValue> array;

  bool is_integer() const;
  bool is_float() const { return kind == Kind::f32 || kind == Kind::f64; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // absolute byte offset in the file
  uint64_t n_bytes = 0;      // bytes of (quantised) data
  int64_t n_elements() const;
  // PyTorch order: reversed ne, e.g. a matrix [n_out, n_in].
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

class GgufFile {
 public:
  // Opens and validates header, metadata and tensor table. Throws specdec::Error.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory buffer (used by the fuzzer); `data` must outlive the object.
  static std::shared_ptr<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr if absent

  // Typed metadata access. The *_or variants return the default when the key is absent;
  // the others throw (naming file and key) when absent or of the wrong type.
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const GgufValue& get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t def) const;
  double get_float(const std::string& key) const;
  double get_float_or(const std::string& key, double def) const;
  bool get_bool_or(const std::string& key, bool def) const;
  std::string get_string(const std::string& key) const;
  std::string get_string_or(const std::string& key, const std::string& def) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;

  // Pointer to the raw (quantised) bytes of a tensor, bounds-checked at open().
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;
  // True when the bytes are a mapping of the file (open()), not a caller's buffer (parse()).
  bool mapped() const { return map_ != nullptr; }
  // Dequantises a whole tensor to fp32 into out[n_elements()]. Throws for unsupported types.
  void read_f32(const GgufTensorInfo& t, float* out) const;

  // Human-readable header summary (version, architecture, tensor count, types histogram,
  // tokenizer model/pre, vocabulary size) as printed by scripts/fetch_models.sh.
  std::string summary() const;

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  const uint8_t* data_ = nullptr;  // whole file
  size_t size_ = 0;
  void* map_ = nullptr;            // mmap base when opened from disk
};

}  // namespace specdec::io
