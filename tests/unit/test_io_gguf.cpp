// GGUF reader on small files written by a tiny writer below: every metadata value type,
// alignment, tensor placement and values; then corrupted variants (truncations, byte
// flips, bad magic/version/type/offset) must each give specdec::Error, never a crash.
#include <gtest/gtest.h>

#include "tests/support/gguf_writer.h"
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/dequant.h"
#include "io/gguf.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using specdec::io::GgmlType;
using specdec::io::GgufFile;
using specdec::io::GgufValue;

namespace {

using Writer = specdec::testing::GgufWriter;

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  std::vector<uint8_t> data;
};

// Tensor payloads: "a" F32 [4, 2] = 0..7, "b" Q8_0 [32] with d = 1 and q = j - 16,
// "c" F16 [3] = {1, -2, 0.5}.
std::vector<TensorSpec> default_tensors() {
  std::vector<TensorSpec> t(3);
  t[0] = {"a", {4, 2}, 0, {}};
  for (int i = 0; i < 8; ++i) {
    const float v = static_cast<float>(i);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    t[0].data.insert(t[0].data.end(), p, p + 4);
  }
  t[1] = {"b", {32}, 8, {0x00, 0x3C}};
  for (int j = 0; j < 32; ++j) t[1].data.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  t[2] = {"c", {3}, 1, {0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38}};
  return t;
}

// A complete file: one key of every value type, general.alignment = `alignment`,
// then the tensors, each at a multiple of the alignment. The file ends exactly where
// the last tensor's data ends, so any truncation removes needed bytes.
std::vector<uint8_t> build_file(uint32_t version = 3, uint32_t alignment = 64,
                                std::vector<TensorSpec> tensors = default_tensors()) {
  Writer w;
  w.b = {'G', 'G', 'U', 'F'};
  w.put<uint32_t>(version);
  w.put<uint64_t>(tensors.size());
  w.put<uint64_t>(21);
  w.key("general.architecture", 8); w.str("llama");
  w.key("general.alignment", 4); w.put<uint32_t>(alignment);
  w.key("t.u8", 0); w.put<uint8_t>(200);
  w.key("t.i8", 1); w.put<int8_t>(-100);
  w.key("t.u16", 2); w.put<uint16_t>(60000);
  w.key("t.i16", 3); w.put<int16_t>(-30000);
  w.key("t.u32", 4); w.put<uint32_t>(4000000000u);
  w.key("t.i32", 5); w.put<int32_t>(-2000000000);
  w.key("t.f32", 6); w.put<float>(0.25f);
  w.key("t.bool", 7); w.put<uint8_t>(1);
  w.key("t.u64", 10); w.put<uint64_t>(1ull << 40);
  w.key("t.i64", 11); w.put<int64_t>(-(1ll << 40));
  w.key("t.f64", 12); w.put<double>(1e-300);
  w.key("tokenizer.ggml.model", 8); w.str("gpt2");
  w.key("tokenizer.ggml.pre", 8); w.str("smollm");
  w.key("tokenizer.ggml.tokens", 9); w.put<uint32_t>(8); w.put<uint64_t>(3);
  w.str("a"); w.str("b"); w.str("");
  w.key("t.arr_i32", 9); w.put<uint32_t>(5); w.put<uint64_t>(3);
  w.put<int32_t>(1); w.put<int32_t>(-2); w.put<int32_t>(3);
  w.key("t.arr_f32", 9); w.put<uint32_t>(6); w.put<uint64_t>(2); w.put<float>(1.5f); w.put<float>(-2.5f);
  // Nested: array of 2 arrays of i16: [[7, 8], []]
  w.key("t.nested", 9); w.put<uint32_t>(9); w.put<uint64_t>(2);
  w.put<uint32_t>(3); w.put<uint64_t>(2); w.put<int16_t>(7); w.put<int16_t>(8);
  w.put<uint32_t>(3); w.put<uint64_t>(0);
  w.key("t.empty_str", 8); w.str("");
  w.key("t.arr_bool", 9); w.put<uint32_t>(7); w.put<uint64_t>(2); w.put<uint8_t>(0); w.put<uint8_t>(1);
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TensorSpec& t : tensors) {
    offsets.push_back(offset);
    w.str(t.name);
    w.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) w.put<uint64_t>(n);
    w.put<uint32_t>(t.type);
    w.put<uint64_t>(offset);
    offset += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  w.pad_to(alignment);
  const size_t data_start = w.b.size();
  for (size_t k = 0; k < tensors.size(); ++k) {
    w.b.resize(data_start + offsets[k]);
    w.b.insert(w.b.end(), tensors[k].data.begin(), tensors[k].data.end());
  }
  return w.b;
}

// Per-process names so concurrent runs from different build directories do not collide.
std::string temp_path(const std::string& name) {
  return testing::TempDir() + "specdec_io_" + std::to_string(::getpid()) + "_" + name;
}

std::string write_temp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Opens `bytes` written to a file and returns the Error message ("" if it opened).
std::string open_error(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = write_temp(name, bytes);
  try {
    GgufFile::open(path);
  } catch (const specdec::Error& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "";
}

// Parses, then reads every tensor; Error is fine, anything else fails the test.
bool parses_and_reads(const std::vector<uint8_t>& bytes, size_t n) {
  try {
    auto f = GgufFile::parse(bytes.data(), n, "mem.gguf");
    for (const auto& t : f->tensors()) {
      std::vector<float> out(static_cast<size_t>(t.n_elements()));
      f->read_f32(t, out.data());
    }
    f->summary();
    return true;
  } catch (const specdec::Error&) {
    return false;
  }
}

// Byte offset of the tensor-table entry of tensor `name` in a file built above.
size_t find_name(const std::vector<uint8_t>& b, const std::string& name) {
  for (size_t i = 8; i + name.size() <= b.size(); ++i) {
    uint64_t len;
    std::memcpy(&len, &b[i - 8], 8);
    if (len == name.size() && std::memcmp(&b[i], name.data(), name.size()) == 0) return i + name.size();
  }
  return 0;
}

}  // namespace

TEST(IoGguf, ReadsEveryMetadataType) {
  const std::string path = write_temp("ok.gguf", build_file());
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->metadata().size(), 21u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get("t.u8").kind, GgufValue::Kind::u8);
  EXPECT_EQ(f->get_int("t.u8"), 200);
  EXPECT_EQ(f->get_int("t.i8"), -100);
  EXPECT_EQ(f->get_int("t.u16"), 60000);
  EXPECT_EQ(f->get_int("t.i16"), -30000);
  EXPECT_EQ(f->get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f->get_int("t.i32"), -2000000000);
  EXPECT_EQ(f->get("t.u64").u, 1ull << 40);
  EXPECT_EQ(f->get_int("t.i64"), -(1ll << 40));
  EXPECT_EQ(f->get_float("t.f32"), 0.25);
  EXPECT_EQ(f->get_float("t.f64"), 1e-300);
  EXPECT_EQ(f->get("t.f64").kind, GgufValue::Kind::f64);
  EXPECT_TRUE(f->get_bool_or("t.bool", false));
  EXPECT_TRUE(f->get_bool_or("t.absent", true));
  EXPECT_EQ(f->get_int_or("t.absent", 7), 7);
  EXPECT_EQ(f->get_string("t.empty_str"), "");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(f->get_int_array("t.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->get_float_array("t.arr_f32"), (std::vector<double>{1.5, -2.5}));
  EXPECT_EQ(f->get_int_array("t.arr_bool"), (std::vector<int64_t>{0, 1}));
  const GgufValue& nested = f->get("t.nested");
  ASSERT_EQ(nested.array.size(), 2u);
  EXPECT_EQ(nested.array[0].kind, GgufValue::Kind::array);
  EXPECT_EQ(nested.array[0].array.at(1).i, 8);
  EXPECT_TRUE(nested.array[1].array.empty());
  std::remove(path.c_str());
}

TEST(IoGguf, TypedAccessErrorsNameFileAndKey) {
  auto bytes = build_file();
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "typed.gguf");
  for (auto fn : {+[](const GgufFile& g) { g.get_int("general.architecture"); },
                  +[](const GgufFile& g) { g.get_string("t.u8"); },
                  +[](const GgufFile& g) { g.get_string_array("t.arr_i32"); },
                  +[](const GgufFile& g) { g.get_float("missing.key"); }}) {
    try {
      fn(*f);
      ADD_FAILURE() << "no error";
    } catch (const specdec::Error& e) {
      EXPECT_NE(std::string(e.what()).find("typed.gguf"), std::string::npos) << e.what();
    }
  }
}

TEST(IoGguf, TensorTableAndValues) {
  const auto bytes = build_file();
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
  ASSERT_EQ(f->tensors().size(), 3u);
  const auto* a = f->find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(a->n_bytes, 32u);
  EXPECT_EQ(a->offset % 64, 0u);
  // The data section starts at the first multiple of 64 after the table; "b" is 64 past "a".
  const auto* b = f->find_tensor("b");
  EXPECT_EQ(b->offset, a->offset + 64);
  EXPECT_EQ(b->type, GgmlType::Q8_0);
  EXPECT_EQ(b->n_bytes, 34u);
  EXPECT_EQ(f->find_tensor("zzz"), nullptr);
  std::vector<float> out(8);
  f->read_f32(*a, out.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], static_cast<float>(i));
  out.resize(32);
  f->read_f32(*b, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], static_cast<float>(j - 16));
  f->read_f32(*f->find_tensor("c"), out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  EXPECT_EQ(bytes.size(), f->find_tensor("c")->offset + 6);
}

TEST(IoGguf, Version2AndDefaultAlignment) {
  auto bytes = build_file(2, 32);
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "v2.gguf");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->tensors()[0].offset % 32, 0u);
}

TEST(IoGguf, SummaryNamesArchitectureAndTypes) {
  auto bytes = build_file();
  const std::string s = GgufFile::parse(bytes.data(), bytes.size(), "s.gguf")->summary();
  for (const char* want : {"version: 3", "architecture: llama", "tensors: 3", "F32=1", "Q8_0=1", "F16=1",
                           "tokenizer.ggml.model: gpt2", "tokenizer.ggml.pre: smollm", "vocab size: 3"})
    EXPECT_NE(s.find(want), std::string::npos) << want << " not in\n" << s;
}

TEST(IoGguf, EveryTruncationIsAnError) {
  const auto bytes = build_file();
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(GgufFile::parse(bytes.data(), n, "trunc.gguf"), specdec::Error) << "length " << n;
  // On disk too, naming the file.
  for (size_t n : {size_t(0), size_t(10), size_t(100), bytes.size() / 2, bytes.size() - 1}) {
    const std::string msg = open_error("trunc.gguf", std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    EXPECT_NE(msg.find(temp_path("trunc.gguf")), std::string::npos) << n << ": " << msg;
  }
}

TEST(IoGguf, ByteFlipsNeverCrash) {
  const auto bytes = build_file();
  const size_t data_start = bytes.size() - 64 - 64 - 6;  // a, b padded to 64; c is 6 bytes
  int n_errors = 0, n_ok = 0;
  for (size_t i = 0; i < data_start; ++i) {
    for (uint8_t mask : {0x01, 0x10, 0x80, 0xFF}) {
      auto copy = bytes;
      copy[i] ^= mask;
      (parses_and_reads(copy, copy.size()) ? n_ok : n_errors)++;
    }
  }
  // Most flips in the header and table are detectable; flips inside strings are not.
  EXPECT_GT(n_errors, 0);
  EXPECT_GT(n_ok, 0);
}

TEST(IoGguf, BadMagic) {
  auto bytes = build_file();
  bytes[0] = 'X';
  const std::string msg = open_error("magic.gguf", bytes);
  EXPECT_NE(msg.find(temp_path("magic.gguf")), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
}

TEST(IoGguf, Version1Rejected) {
  for (uint32_t v : {1u, 4u, 0xFFFFFFFFu}) {
    const std::string msg = open_error("v1.gguf", build_file(v));
    EXPECT_NE(msg.find(temp_path("v1.gguf")), std::string::npos) << msg;
    EXPECT_NE(msg.find("version " + std::to_string(v)), std::string::npos) << msg;
  }
}

TEST(IoGguf, UnknownTensorType) {
  auto t = default_tensors();
  t[1].type = 99;
  const std::string msg = open_error("type.gguf", build_file(3, 64, t));
  EXPECT_NE(msg.find(temp_path("type.gguf")), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown ggml tensor type 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
}

TEST(IoGguf, OffsetOutOfRange) {
  auto bytes = build_file();
  // "c"'s offset field follows its name, n_dims, ne[0] and type: patch it past the end.
  const size_t at = find_name(bytes, "c") + 4 + 8 + 4;
  const uint64_t bad = 1ull << 20;
  std::memcpy(&bytes[at], &bad, 8);
  const std::string msg = open_error("offset.gguf", bytes);
  EXPECT_NE(msg.find(temp_path("offset.gguf")), std::string::npos) << msg;
  EXPECT_NE(msg.find("'c'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  // A huge offset must not wrap around when added to the data start.
  const uint64_t wrap = ~0ull - 63;
  std::memcpy(&bytes[at], &wrap, 8);
  EXPECT_NE(open_error("offset.gguf", bytes).find("out of range"), std::string::npos);
}

TEST(IoGguf, StructuralLimits) {
  auto t = default_tensors();
  t[0].ne = {2, 2, 1, 1, 2};  // 5 dims
  EXPECT_NE(open_error("dims.gguf", build_file(3, 64, t)).find("n_dims 5"), std::string::npos);
  t = default_tensors();
  t[1].ne = {16};  // half a Q8_0 block
  EXPECT_NE(open_error("block.gguf", build_file(3, 64, t)).find("block size"), std::string::npos);
  t = default_tensors();
  t[0].ne = {1ull << 32, 1ull << 32};  // 2^64 elements
  EXPECT_NE(open_error("ovf.gguf", build_file(3, 64, t)).find("overflow"), std::string::npos);
  t = default_tensors();
  t[2].name = "a";
  EXPECT_NE(open_error("dup.gguf", build_file(3, 64, t)).find("duplicate tensor"), std::string::npos);
  EXPECT_NE(open_error("align.gguf", build_file(3, 48)).find("general.alignment"), std::string::npos);
  // Absurd counts are rejected before anything is allocated.
  auto bytes = build_file();
  const uint64_t huge = 1ull << 60;
  std::memcpy(&bytes[16], &huge, 8);
  EXPECT_NE(open_error("count.gguf", bytes).find("metadata count"), std::string::npos);
  bytes = build_file();
  std::memcpy(&bytes[8], &huge, 8);
  EXPECT_NE(open_error("count.gguf", bytes).find("tensor count"), std::string::npos);
}

TEST(IoGguf, UnsupportedQuantTypeOpensButCannotBeRead) {
  auto t = default_tensors();
  t[1] = {"q2", {256}, 10, std::vector<uint8_t>(84, 0)};  // Q2_K block: 84 bytes
  const auto bytes = build_file(3, 64, t);
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "q2k.gguf");
  std::vector<float> out(256);
  try {
    f->read_f32(*f->find_tensor("q2"), out.data());
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q2_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q2k.gguf"), std::string::npos) << e.what();
  }
}

TEST(IoGguf, MissingFileNamesPath) {
  try {
    GgufFile::open("/nonexistent/dir/model.gguf");
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.gguf"), std::string::npos);
  }
}

// The fuzzers' committed seed files hold a tensor of every supported quant type with
// varied bytes; the python `gguf` package (llama.cpp's reference reader) dequantised
// them into tests/fixtures/io/seed_tensors.json. This cross-checks the K-quants, which
// the SmolLM2 file does not contain, against an independent implementation.
TEST(IoGguf, SeedFilesMatchPythonGguf) {
  const std::string root = source_dir();
  std::ifstream in(root + "/tests/fixtures/io/seed_tensors.json");
  ASSERT_TRUE(in) << "missing fixture: run scripts/reference/make_io_fixtures.py";
  const auto doc = nlohmann::json::parse(in);
  std::set<std::string> types;
  for (const auto& [file, tensors] : doc["files"].items()) {
    auto f = GgufFile::open(root + "/tests/fuzz/seeds_gguf/" + file);
    for (const auto& [name, ref] : tensors.items()) {
      SCOPED_TRACE(file + ":" + name);
      const auto* t = f->find_tensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(specdec::io::ggml_type_name(t->type), ref["type"].get<std::string>());
      types.insert(ref["type"].get<std::string>());
      const auto want = ref["values"].get<std::vector<double>>();
      ASSERT_EQ(static_cast<size_t>(t->n_elements()), want.size());
      std::vector<float> y(want.size());
      f->read_f32(*t, y.data());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6 * std::abs(want[i])) << i;
    }
  }
  EXPECT_EQ(types.size(), 11u);  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
}
