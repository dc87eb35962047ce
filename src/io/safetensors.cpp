// safetensors reader. A file is: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "string", ...}}
// then the data section; offsets are relative to its start. A sharded checkpoint has
// model.safetensors.index.json whose "weight_map" maps tensor name -> shard file.
#include "io/safetensors.h"
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/dequant.h"

namespace specdec::io {
namespace {

using nlohmann::json;

constexpr uint64_t k_max_header = 100ull << 20;  // the reference implementation's limit
constexpr int k_max_json_depth = 64;

// Bytes per element of every dtype safetensors defines; 0 for an unknown name.
uint64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// nlohmann parses iteratively but destroys recursively; cap nesting so hostile input
// cannot exhaust the stack.
json parse_json(const char* begin, const char* end, const std::string& what) {
  try {
    json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t, json&) {
      if (depth > k_max_json_depth) fail(what, ": JSON nested deeper than ", k_max_json_depth);
      return true;
    };
    return json::parse(begin, end, limit_depth);
  } catch (const json::exception& e) {
    fail(what, ": malformed JSON: ", e.what());
  }
}

uint64_t json_u64(const json& v, const std::string& file, const std::string& name, const char* field) {
  if (!v.is_number_unsigned())
    fail("safetensors ", file, ": tensor '", name, "': ", field, " entry ", v.dump(),
         " is not a non-negative integer");
  return v.get<uint64_t>();
}

SafetensorsTensorInfo parse_entry(const std::string& name, const json& e, uint64_t data_size,
                                  const std::string& file) {
  const std::string where = "safetensors " + file + ": tensor '" + name + "'";
  if (!e.is_object()) fail(where, ": entry is not an object");
  SafetensorsTensorInfo t;
  t.name = name;
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) fail(where, ": missing string 'dtype'");
  t.dtype = dt->get<std::string>();
  const uint64_t elem = dtype_size(t.dtype);
  if (elem == 0) fail(where, ": unknown dtype '", t.dtype, "'");
  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array() || sh->size() > 8) fail(where, ": 'shape' must be an array of at most 8 dims");
  uint64_t n = 1;
  for (const json& d : *sh) {
    const uint64_t v = json_u64(d, file, name, "shape");
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || (v != 0 && n > UINT64_MAX / elem / v))
      fail(where, ": shape ", sh->dump(), " overflows");
    n *= v;
    t.shape.push_back(static_cast<int64_t>(v));
  }
  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2) fail(where, ": 'data_offsets' must be [begin, end]");
  t.begin = json_u64((*off)[0], file, name, "data_offsets");
  t.end = json_u64((*off)[1], file, name, "data_offsets");
  if (t.begin > t.end || t.end > data_size)
    fail(where, ": data_offsets [", t.begin, ", ", t.end, "] outside the data section of ", data_size, " bytes");
  if (t.end - t.begin != n * elem)
    fail(where, ": data_offsets span ", t.end - t.begin, " bytes but shape ", sh->dump(), " of ", t.dtype,
         " needs ", n * elem);
  return t;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("safetensors: cannot open ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

int64_t SafetensorsTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow ruled out at parse
  return n;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  size_t size = 0;
  void* map = map_file("safetensors", path, 8, "the 8-byte header length", size);
  std::shared_ptr<SafetensorsFile> f;
  try {
    f = parse(static_cast<const uint8_t*>(map), size, path);
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
  f->map_ = map;
  f->map_size_ = size;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                        const std::string& name) {
  if (size < 8) fail("safetensors ", name, ": ", size, " bytes is too small for the 8-byte header length");
  uint64_t n_header;
  std::memcpy(&n_header, data, 8);
  if (n_header > k_max_header || n_header > size - 8)
    fail("safetensors ", name, ": header length ", n_header, " at offset 0 exceeds the file (", size,
         " bytes) or the 100 MiB limit");
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->data_ = data + 8 + n_header;
  f->data_size_ = size - 8 - static_cast<size_t>(n_header);
  const char* text = reinterpret_cast<const char*>(data + 8);
  const json header = parse_json(text, text + n_header, "safetensors " + name + ": header");
  if (!header.is_object()) fail("safetensors ", name, ": header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail("safetensors ", name, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("safetensors ", name, ": __metadata__ key '", m.key(), "' is not a string");
        f->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    f->tensors_[it.key()] = parse_entry(it.key(), *it, f->data_size_, name);
  }
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read_f32(const SafetensorsTensorInfo& t, float* out) const {
  if (t.begin > t.end || t.end > data_size_)
    fail("safetensors ", path_, ": tensor '", t.name, "' byte range is outside the data section");
  const uint8_t* src = data_ + t.begin;
  const int64_t n = static_cast<int64_t>(t.end - t.begin) / static_cast<int64_t>(std::max<uint64_t>(1, dtype_size(t.dtype)));
  if (t.dtype == "F32") return dequantize(GgmlType::F32, src, out, n);
  if (t.dtype == "F16") return dequantize(GgmlType::F16, src, out, n);
  if (t.dtype == "BF16") return dequantize(GgmlType::BF16, src, out, n);
  if (t.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      out[i] = static_cast<float>(v);
    }
    return;
  }
  fail("safetensors ", path_, ": tensor '", t.name, "' has dtype ", t.dtype,
       ", which cannot be converted to fp32 (supported: F32 F16 BF16 F64)");
}

std::shared_ptr<SafetensorsModel> SafetensorsModel::open_dir(const std::string& dir) {
  auto m = std::make_shared<SafetensorsModel>();
  m->dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!file_exists(index_path)) {
    const std::string single = dir + "/model.safetensors";
    if (!file_exists(single))
      fail("safetensors ", dir, ": neither model.safetensors.index.json nor model.safetensors found");
    m->shards_.push_back(SafetensorsFile::open(single));
    for (const auto& [name, info] : m->shards_[0]->tensors()) m->where_[name] = 0;
    return m;
  }
  const std::string text = read_text(index_path);
  const json index = parse_json(text.data(), text.data() + text.size(), "safetensors " + index_path);
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (wm == index.end() || !wm->is_object()) fail("safetensors ", index_path, ": missing object 'weight_map'");
  std::map<std::string, size_t> shard_index;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) fail("safetensors ", index_path, ": weight_map entry '", it.key(), "' is not a string");
    const std::string shard = it->get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos)
      fail("safetensors ", index_path, ": weight_map entry '", it.key(), "' names shard '", shard,
           "' (expected a file name in the same directory)");
    auto [pos, inserted] = shard_index.emplace(shard, m->shards_.size());
    if (inserted) m->shards_.push_back(SafetensorsFile::open(dir + "/" + shard));
    if (!m->shards_[pos->second]->find(it.key()))
      fail("safetensors ", dir, "/", shard, ": tensor '", it.key(), "' listed in the weight_map is missing");
    m->where_[it.key()] = pos->second;
  }
  return m;
}

std::vector<std::string> SafetensorsModel::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, shard] : where_) names.push_back(name);
  return names;
}

const SafetensorsTensorInfo* SafetensorsModel::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : shards_[it->second]->find(name);
}

void SafetensorsModel::read_f32(const std::string& name, float* out) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("safetensors ", dir_, ": no tensor named '", name, "'");
  const SafetensorsFile& shard = *shards_[it->second];
  shard.read_f32(*shard.find(name), out);
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsF32>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t n = 1;
    for (int64_t s : t.shape) n *= static_cast<uint64_t>(s);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 4 * n}}};
    offset += 4 * n;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SD_CHECK(out.good(), "safetensors: cannot write '", tmp, "'");
    const uint64_t len = text.size();  // little-endian on every platform specdec builds for
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors) {
      uint64_t n = 1;
      for (int64_t s : t.shape) n *= static_cast<uint64_t>(s);
      out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(4 * n));
    }
    out.flush();
    SD_CHECK(out.good(), "safetensors: writing '", tmp, "' failed (disk full?)");
  }
  SD_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "safetensors: cannot rename '", tmp, "' to '", path, "': ",
           std::strerror(errno));
}

}  // namespace specdec::io
