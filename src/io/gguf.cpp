// GGUF reader. File layout (v2/v3, little-endian):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv
//   n_kv x { string key, u32 value_type, value }        string = u64 length + bytes
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section; tensor offsets are
//   relative to its start. v1 used u32 counts and lengths and is rejected.
// Every read goes through Cursor, which checks bounds before touching memory, so a
// truncated or hostile file yields an Error rather than an out-of-bounds read.
#include "io/gguf.h"
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/dequant.h"

namespace specdec::io {
namespace {

constexpr uint64_t k_default_alignment = 32;
constexpr int k_max_dims = 4;
constexpr int k_max_array_depth = 8;  // nested arrays; real files use depth 1

// Bounds-checked little-endian reader over the whole file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const std::string& file() const { return file_; }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail("gguf ", file_, ": truncated at offset ", pos_, ": need ", n, " bytes for ", what,
           ", only ", remaining(), " left");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail("gguf ", file_, ": string length ", len, " of ", what, " at offset ", at,
           " runs past the end of the file (", remaining(), " bytes left)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
};

// Smallest encoding of a value of each type: bounds element counts before allocating.
uint64_t min_value_bytes(uint32_t type) {
  switch (type) {
    case 0: case 1: case 7: return 1;
    case 2: case 3: return 2;
    case 4: case 5: case 6: return 4;
    case 8: return 8;    // length prefix
    case 9: return 12;   // element type + count
    case 10: case 11: case 12: return 8;
    default: return 1;
  }
}

const char* value_type_name(uint32_t type) {
  static const char* names[] = {"u8",     "i8",    "u16",  "i16", "u32", "i32", "f32",
                                "bool",   "string", "array", "u64", "i64", "f64"};
  return type < 13 ? names[type] : "unknown";
}

GgufValue read_value(Cursor& cur, uint32_t type, const std::string& key, int depth);

GgufValue read_array(Cursor& cur, const std::string& key, int depth) {
  const size_t at = cur.pos();
  if (depth >= k_max_array_depth)
    fail("gguf ", cur.file(), ": key '", key, "' at offset ", at, ": arrays nested deeper than ",
         k_max_array_depth);
  const uint32_t elem_type = cur.read<uint32_t>("array element type");
  const uint64_t n = cur.read<uint64_t>("array length");
  if (elem_type > 12)
    fail("gguf ", cur.file(), ": key '", key, "' at offset ", at, ": unknown array element type ",
         elem_type, " (expected 0..12)");
  if (n > cur.remaining() / min_value_bytes(elem_type))
    fail("gguf ", cur.file(), ": key '", key, "' at offset ", at, ": array of ", n, " ",
         value_type_name(elem_type), " does not fit in the ", cur.remaining(), " bytes left");
  GgufValue v;
  v.kind = GgufValue::Kind::array;
  v.array.reserve(static_cast<size_t>(n));
  for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(cur, elem_type, key, depth + 1));
  return v;
}

template <class T>
GgufValue integer_value(Cursor& cur, GgufValue::Kind kind) {
  GgufValue v;
  v.kind = kind;
  const T x = cur.read<T>("integer value");
  v.i = static_cast<int64_t>(x);
  v.u = static_cast<uint64_t>(x);
  v.f = static_cast<double>(x);
  return v;
}

GgufValue read_value(Cursor& cur, uint32_t type, const std::string& key, int depth) {
  using K = GgufValue::Kind;
  GgufValue v;
  switch (type) {
    case 0: return integer_value<uint8_t>(cur, K::u8);
    case 1: return integer_value<int8_t>(cur, K::i8);
    case 2: return integer_value<uint16_t>(cur, K::u16);
    case 3: return integer_value<int16_t>(cur, K::i16);
    case 4: return integer_value<uint32_t>(cur, K::u32);
    case 5: return integer_value<int32_t>(cur, K::i32);
    case 10: return integer_value<uint64_t>(cur, K::u64);
    case 11: return integer_value<int64_t>(cur, K::i64);
    case 6: v.kind = K::f32; v.f = cur.read<float>("f32 value"); return v;
    case 12: v.kind = K::f64; v.f = cur.read<double>("f64 value"); return v;
    case 7: {
      const size_t at = cur.pos();
      const uint8_t b = cur.read<uint8_t>("bool value");
      if (b > 1)
        fail("gguf ", cur.file(), ": key '", key, "' at offset ", at, ": bool byte ", int(b),
             " (expected 0 or 1)");
      v.kind = K::boolean;
      v.i = v.u = b;
      return v;
    }
    case 8: v.kind = K::string; v.s = cur.read_string("string value"); return v;
    case 9: return read_array(cur, key, depth);
    default: break;
  }
  fail("gguf ", cur.file(), ": key '", key, "' at offset ", cur.pos() - 4, ": unknown value type ",
       type, " (expected 0..12)");
}

bool known_ggml_type(uint32_t t) {
  switch (static_cast<GgmlType>(t)) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q8_1:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::Q8_K: case GgmlType::BF16:
      return true;
  }
  return false;
}

// Reads one tensor-table entry; the offset is still relative to the data section.
GgufTensorInfo read_tensor_info(Cursor& cur, uint64_t index) {
  const std::string& file = cur.file();
  GgufTensorInfo t;
  t.name = cur.read_string("tensor name");
  const size_t at = cur.pos();
  const uint32_t n_dims = cur.read<uint32_t>("tensor n_dims");
  if (n_dims > k_max_dims)
    fail("gguf ", file, ": tensor '", t.name, "' (#", index, ") at offset ", at, ": n_dims ", n_dims,
         " (expected at most ", k_max_dims, ")");
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = cur.read<uint64_t>("tensor dimension");
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (ne != 0 && static_cast<uint64_t>(n_elements) > static_cast<uint64_t>(INT64_MAX) / ne))
      fail("gguf ", file, ": tensor '", t.name, "': element count overflows at dimension ", d,
           " (ne = ", ne, ")");
    t.ne.push_back(static_cast<int64_t>(ne));
    n_elements *= static_cast<int64_t>(ne);
  }
  const size_t type_at = cur.pos();
  const uint32_t type = cur.read<uint32_t>("tensor type");
  if (!known_ggml_type(type))
    fail("gguf ", file, ": tensor '", t.name, "' at offset ", type_at, ": unknown ggml tensor type ",
         type);
  t.type = static_cast<GgmlType>(type);
  t.offset = cur.read<uint64_t>("tensor data offset");
  const int64_t bs = ggml_block_size(t.type);
  const int64_t row = t.ne.empty() ? 1 : t.ne[0];
  if (row % bs != 0)
    fail("gguf ", file, ": tensor '", t.name, "' of type ", ggml_type_name(t.type), ": row length ",
         row, " is not a multiple of the block size ", bs);
  const uint64_t n_blocks = static_cast<uint64_t>(n_elements / bs);
  const uint64_t type_size = static_cast<uint64_t>(ggml_type_size(t.type));
  if (n_blocks > std::numeric_limits<uint64_t>::max() / type_size)
    fail("gguf ", file, ": tensor '", t.name, "': byte size of ", n_elements, " elements overflows");
  t.n_bytes = n_blocks * type_size;
  return t;
}

uint64_t alignment_of(const std::map<std::string, GgufValue>& kv, const std::string& file) {
  auto it = kv.find("general.alignment");
  if (it == kv.end()) return k_default_alignment;
  const GgufValue& v = it->second;
  if (!v.is_integer() || v.kind == GgufValue::Kind::boolean)
    fail("gguf ", file, ": general.alignment must be an integer");
  const uint64_t a = v.u;
  if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
    fail("gguf ", file, ": general.alignment = ", a, " (expected a power of two up to 1 MiB)");
  return a;
}

// Reads the tensor table, places the data section at the next multiple of the alignment
// and checks every tensor's byte range lies inside the file. Offsets become absolute.
std::vector<GgufTensorInfo> read_tensor_table(Cursor& cur, uint64_t n_tensors, uint64_t alignment) {
  const std::string& file = cur.file();
  std::vector<GgufTensorInfo> tensors;
  tensors.reserve(static_cast<size_t>(n_tensors));
  std::map<std::string, uint64_t> seen;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    tensors.push_back(read_tensor_info(cur, k));
    if (!seen.emplace(tensors.back().name, k).second)
      fail("gguf ", file, ": duplicate tensor name '", tensors.back().name, "' (#", k, ")");
  }
  const uint64_t size = cur.pos() + cur.remaining();
  const uint64_t data_start = (cur.pos() + alignment - 1) / alignment * alignment;
  for (GgufTensorInfo& t : tensors) {
    if (t.offset % alignment != 0)
      fail("gguf ", file, ": tensor '", t.name, "': data offset ", t.offset,
           " is not a multiple of the alignment ", alignment);
    if (data_start > size || t.offset > size - data_start || t.n_bytes > size - data_start - t.offset)
      fail("gguf ", file, ": tensor '", t.name, "' (", ggml_type_name(t.type), ", ", t.n_bytes,
           " bytes) at data offset ", t.offset, " (absolute ", data_start + t.offset,
           ") runs past the end of the file (", size, " bytes); out of range");
    t.offset += data_start;
  }
  return tensors;
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::Q4_0: return "Q4_0";
    case GgmlType::Q4_1: return "Q4_1";
    case GgmlType::Q5_0: return "Q5_0";
    case GgmlType::Q5_1: return "Q5_1";
    case GgmlType::Q8_0: return "Q8_0";
    case GgmlType::Q8_1: return "Q8_1";
    case GgmlType::Q2_K: return "Q2_K";
    case GgmlType::Q3_K: return "Q3_K";
    case GgmlType::Q4_K: return "Q4_K";
    case GgmlType::Q5_K: return "Q5_K";
    case GgmlType::Q6_K: return "Q6_K";
    case GgmlType::Q8_K: return "Q8_K";
    case GgmlType::BF16: return "BF16";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (kind) {
    case Kind::u8: case Kind::i8: case Kind::u16: case Kind::i16: case Kind::u32:
    case Kind::i32: case Kind::u64: case Kind::i64: case Kind::boolean:
      return true;
    default:
      return false;
  }
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // overflow ruled out when the table was read
  return n;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  size_t size = 0;
  void* map = map_file("gguf", path, 24, "a GGUF header (24 bytes)", size);
  std::shared_ptr<GgufFile> f;
  try {
    f = parse(static_cast<const uint8_t*>(map), size, path);
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
  f->map_ = map;
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(map_, size_);
}

std::shared_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->data_ = data;
  f->size_ = size;
  Cursor cur(data, size, f->path_);

  cur.need(4, "magic");
  if (std::memcmp(data, "GGUF", 4) != 0)
    fail("gguf ", name, ": bad magic at offset 0 (expected \"GGUF\"; not a GGUF file)");
  cur.read<uint32_t>("magic");
  f->version_ = cur.read<uint32_t>("version");
  if (f->version_ != 2 && f->version_ != 3)
    fail("gguf ", name, ": unsupported GGUF version ", f->version_, " at offset 4 (expected 2 or 3)");
  const uint64_t n_tensors = cur.read<uint64_t>("tensor count");
  const uint64_t n_kv = cur.read<uint64_t>("metadata count");
  // A key/value takes at least 13 bytes, a tensor entry at least 24.
  if (n_kv > cur.remaining() / 13)
    fail("gguf ", name, ": metadata count ", n_kv, " at offset 16 is impossible for a file of ", size,
         " bytes");
  if (n_tensors > cur.remaining() / 24)
    fail("gguf ", name, ": tensor count ", n_tensors, " at offset 8 is impossible for a file of ",
         size, " bytes");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const size_t at = cur.pos();
    std::string key = cur.read_string("metadata key");
    const uint32_t type = cur.read<uint32_t>("metadata value type");
    GgufValue v = read_value(cur, type, key, 0);
    if (!f->kv_.emplace(key, std::move(v)).second)
      fail("gguf ", name, ": duplicate metadata key '", key, "' at offset ", at);
  }
  f->alignment_ = alignment_of(f->kv_, name);
  f->tensors_ = read_tensor_table(cur, n_tensors, f->alignment_);
  return f;
}

}  // namespace specdec::io

namespace specdec::io {

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) fail("gguf ", path_, ": missing metadata key '", key, "'");
  return it->second;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = get(key);
  if (!v.is_integer()) fail("gguf ", path_, ": metadata key '", key, "' is not an integer");
  if (v.kind == GgufValue::Kind::u64 && v.u > static_cast<uint64_t>(INT64_MAX))
    fail("gguf ", path_, ": metadata key '", key, "' = ", v.u, " does not fit in int64");
  return v.i;
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t def) const {
  return has(key) ? get_int(key) : def;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.is_float()) return v.f;
  if (v.is_integer() && v.kind != GgufValue::Kind::boolean) return static_cast<double>(v.i);
  fail("gguf ", path_, ": metadata key '", key, "' is not a number");
}

double GgufFile::get_float_or(const std::string& key, double def) const {
  return has(key) ? get_float(key) : def;
}

bool GgufFile::get_bool_or(const std::string& key, bool def) const {
  if (!has(key)) return def;
  const GgufValue& v = get(key);
  if (v.kind != GgufValue::Kind::boolean) fail("gguf ", path_, ": metadata key '", key, "' is not a bool");
  return v.i != 0;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.kind != GgufValue::Kind::string) fail("gguf ", path_, ": metadata key '", key, "' is not a string");
  return v.s;
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = get(key);
  std::vector<std::string> out;
  bool ok = v.kind == GgufValue::Kind::array;
  for (size_t k = 0; ok && k < v.array.size(); ++k) {
    ok = v.array[k].kind == GgufValue::Kind::string;
    if (ok) out.push_back(v.array[k].s);
  }
  if (!ok) fail("gguf ", path_, ": metadata key '", key, "' is not an array of strings");
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = get(key);
  std::vector<int64_t> out;
  bool ok = v.kind == GgufValue::Kind::array;
  for (size_t k = 0; ok && k < v.array.size(); ++k) {
    ok = v.array[k].is_integer();
    if (ok) out.push_back(v.array[k].i);
  }
  if (!ok) fail("gguf ", path_, ": metadata key '", key, "' is not an array of integers");
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = get(key);
  std::vector<double> out;
  bool ok = v.kind == GgufValue::Kind::array;
  for (size_t k = 0; ok && k < v.array.size(); ++k) {
    const GgufValue& e = v.array[k];
    ok = e.is_float() || (e.is_integer() && e.kind != GgufValue::Kind::boolean);
    if (ok) out.push_back(e.is_float() ? e.f : static_cast<double>(e.i));
  }
  if (!ok) fail("gguf ", path_, ": metadata key '", key, "' is not an array of numbers");
  return out;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  // Guard against a GgufTensorInfo that did not come from this file.
  if (t.offset > size_ || t.n_bytes > size_ - t.offset)
    fail("gguf ", path_, ": tensor '", t.name, "' byte range is outside the file");
  return data_ + t.offset;
}

void GgufFile::read_f32(const GgufTensorInfo& t, float* out) const {
  if (!ggml_type_supported(t.type))
    fail("gguf ", path_, ": tensor '", t.name, "' has type ", ggml_type_name(t.type),
         ", which cannot be dequantised (supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)");
  dequantize(t.type, tensor_data(t), out, t.n_elements());
}

std::string GgufFile::summary() const {
  std::ostringstream os;
  const std::string arch = get_string_or("general.architecture", "?");
  os << "file: " << path_ << "\n";
  os << "GGUF version: " << version_ << "\n";
  os << "architecture: " << arch << "\n";
  if (has("general.name") && get(std::string("general.name")).kind == GgufValue::Kind::string)
    os << "name: " << get_string("general.name") << "\n";
  os << "tensors: " << tensors_.size() << "\n";
  std::map<std::string, int> hist;
  int64_t n_params = 0;
  for (const GgufTensorInfo& t : tensors_) {
    ++hist[ggml_type_name(t.type)];
    n_params += t.n_elements();
  }
  os << "parameters: " << n_params << "\n";
  os << "tensor types:";
  for (const auto& [name, count] : hist) os << " " << name << "=" << count;
  os << "\n";
  auto str_or_missing = [&](const std::string& key) {
    auto it = kv_.find(key);
    return it != kv_.end() && it->second.kind == GgufValue::Kind::string ? it->second.s : "(missing)";
  };
  os << "tokenizer.ggml.model: " << str_or_missing("tokenizer.ggml.model") << "\n";
  os << "tokenizer.ggml.pre: " << str_or_missing("tokenizer.ggml.pre") << "\n";
  int64_t n_vocab = -1;
  auto tok = kv_.find("tokenizer.ggml.tokens");
  if (tok != kv_.end() && tok->second.kind == GgufValue::Kind::array)
    n_vocab = static_cast<int64_t>(tok->second.array.size());
  os << "vocab size: " << (n_vocab >= 0 ? std::to_string(n_vocab) : std::string("(no tokenizer.ggml.tokens)"))
     << "\n";
  return os.str();
}

}  // namespace specdec::io
