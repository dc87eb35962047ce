// safetensors reader on files written here: single file, sharded directory, dtype
// conversion with hand-chosen bit patterns, and malformed/truncated inputs that must give
// specdec::Error naming the file and tensor.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

using nlohmann::json;
using specdec::io::SafetensorsFile;
using specdec::io::SafetensorsModel;

namespace test_io_safetensors {  // this file's own names (its tests compile in a batch with others)

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <class T>
std::vector<uint8_t> raw(std::initializer_list<T> values) {
  std::vector<uint8_t> out;
  for (T v : values) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  return out;
}

// Serialises entries in order (the header JSON is padded with spaces to 8 bytes, as the
// reference writer does). `patch` may edit the header JSON before it is written.
std::vector<uint8_t> build(const std::vector<Entry>& entries, const std::function<void(json&)>& patch = {}) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  std::vector<uint8_t> data;
  for (const Entry& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    data.insert(data.end(), e.bytes.begin(), e.bytes.end());
    offset += e.bytes.size();
  }
  if (patch) patch(header);
  std::string text = header.dump();
  while (text.size() % 8) text.push_back(' ');
  std::vector<uint8_t> out = raw<uint64_t>({text.size()});
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// F32 [2, 3] = 0..5; F16 [4] = {1, -2, 0.5, 65504}; BF16 [3] = {1, -3, 3.140625};
// F64 [2] = {0.1, -1e10}; I32 [2] (not convertible).
std::vector<Entry> default_entries() {
  return {
      {"w.f32", "F32", {2, 3}, raw<float>({0, 1, 2, 3, 4, 5})},
      {"w.f16", "F16", {4}, raw<uint16_t>({0x3C00, 0xC000, 0x3800, 0x7BFF})},
      {"w.bf16", "BF16", {3}, raw<uint16_t>({0x3F80, 0xC040, 0x4049})},
      {"w.f64", "F64", {2}, raw<double>({0.1, -1e10})},
      {"w.i32", "I32", {2}, raw<int32_t>({1, 2})},
  };
}

// Per-process names so concurrent runs from different build directories do not collide.
std::string temp_path(const std::string& name) {
  return testing::TempDir() + "specdec_io_st_" + std::to_string(::getpid()) + "_" + name;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string parse_error(const std::vector<uint8_t>& bytes, size_t n, const std::string& name = "bad.safetensors") {
  try {
    SafetensorsFile::parse(bytes.data(), n, name);
  } catch (const specdec::Error& e) {
    return e.what();
  }
  return "";
}

TEST(IoSafetensors, SingleFileDtypes) {
  const std::string path = temp_path("single.safetensors");
  write_file(path, build(default_entries()));
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const auto* t = f->find("w.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->n_elements(), 6);
  std::vector<float> out(6);
  f->read_f32(*t, out.data());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], static_cast<float>(i));
  f->read_f32(*f->find("w.f16"), out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  EXPECT_EQ(out[3], 65504.0f);
  f->read_f32(*f->find("w.bf16"), out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 3.140625f);
  f->read_f32(*f->find("w.f64"), out.data());
  EXPECT_EQ(out[0], 0.1f);
  EXPECT_EQ(out[1], -1e10f);
  EXPECT_EQ(f->find("absent"), nullptr);
  try {
    f->read_f32(*f->find("w.i32"), out.data());
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("w.i32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(IoSafetensors, ShardedDirectory) {
  const std::string dir = temp_path("sharded");
  ::mkdir(dir.c_str(), 0755);
  auto entries = default_entries();
  write_file(dir + "/model-00001-of-00002.safetensors", build({entries[0], entries[1]}));
  write_file(dir + "/model-00002-of-00002.safetensors", build({entries[2], entries[3]}));
  json index = {{"metadata", {{"total_size", 0}}},
                {"weight_map",
                 {{"w.f32", "model-00001-of-00002.safetensors"},
                  {"w.f16", "model-00001-of-00002.safetensors"},
                  {"w.bf16", "model-00002-of-00002.safetensors"},
                  {"w.f64", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  auto m = SafetensorsModel::open_dir(dir);
  EXPECT_EQ(m->tensor_names(), (std::vector<std::string>{"w.bf16", "w.f16", "w.f32", "w.f64"}));
  std::vector<float> out(6);
  m->read_f32("w.bf16", out.data());
  EXPECT_EQ(out[1], -3.0f);
  m->read_f32("w.f32", out.data());
  EXPECT_EQ(out[5], 5.0f);
  EXPECT_EQ(m->find("w.f64")->dtype, "F64");
  EXPECT_EQ(m->config_json_path(), dir + "/config.json");
  EXPECT_THROW(m->read_f32("nope", out.data()), specdec::Error);

  // A weight_map entry pointing at a shard without that tensor.
  index["weight_map"]["w.extra"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  try {
    SafetensorsModel::open_dir(dir);
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.extra"), std::string::npos) << e.what();
  }
  // Malformed index JSON names the index file.
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\": ";
  try {
    SafetensorsModel::open_dir(dir);
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors.index.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(IoSafetensors, SingleFileDirectoryAndEmptyDirectory) {
  const std::string dir = temp_path("single_dir");
  ::mkdir(dir.c_str(), 0755);
  std::remove((dir + "/model.safetensors").c_str());
  EXPECT_THROW(SafetensorsModel::open_dir(dir), specdec::Error);
  write_file(dir + "/model.safetensors", build(default_entries()));
  auto m = SafetensorsModel::open_dir(dir);
  EXPECT_EQ(m->tensor_names().size(), 5u);
  std::vector<float> out(4);
  m->read_f32("w.f16", out.data());
  EXPECT_EQ(out[3], 65504.0f);
  std::filesystem::remove_all(dir);
}

TEST(IoSafetensors, EveryTruncationIsAnError) {
  const auto bytes = build(default_entries());
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_NE(parse_error(bytes, n), "") << "length " << n;
}

TEST(IoSafetensors, MalformedHeaders) {
  const auto entries = default_entries();
  auto expect_error = [&](const std::function<void(json&)>& patch, const std::string& want) {
    const auto bytes = build(entries, patch);
    const std::string msg = parse_error(bytes, bytes.size(), "bad.safetensors");
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << want << ": " << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << want << ": " << msg;
  };
  expect_error([](json& h) { h["w.f16"]["dtype"] = "Q4"; }, "unknown dtype 'Q4'");
  expect_error([](json& h) { h["w.f16"]["shape"] = {5}; }, "w.f16");               // 5 * 2 != 8 bytes
  expect_error([](json& h) { h["w.f16"]["shape"] = {-4}; }, "w.f16");              // negative dim
  expect_error([](json& h) { h["w.f32"]["data_offsets"] = {0, 1 << 20}; }, "outside the data section");
  expect_error([](json& h) { h["w.f32"]["data_offsets"] = {24, 0}; }, "w.f32");     // begin > end
  expect_error([](json& h) { h["w.f32"]["data_offsets"] = {0}; }, "data_offsets");
  expect_error([](json& h) { h["w.f32"].erase("dtype"); }, "dtype");
  expect_error([](json& h) { h["w.f32"] = 3; }, "not an object");
  expect_error([](json& h) { h["__metadata__"]["n"] = 1; }, "__metadata__");
  expect_error([](json& h) { h = json::array({1, 2}); }, "not a JSON object");
  expect_error([](json& h) { h["w.f32"]["shape"] = {1ll << 62, 1ll << 62}; }, "overflow");
}

TEST(IoSafetensors, BadHeaderLengthAndJson) {
  auto bytes = build(default_entries());
  auto huge = bytes;
  const uint64_t n = 1ull << 62;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_NE(parse_error(huge, huge.size()).find("header length"), std::string::npos);
  auto broken = bytes;
  broken[8] = '[';  // first byte of the JSON
  EXPECT_NE(parse_error(broken, broken.size()).find("malformed JSON"), std::string::npos);
  // Deep nesting is refused instead of recursing without bound.
  std::string deep(5000, '[');
  deep += std::string(5000, ']');
  std::vector<uint8_t> nested = raw<uint64_t>({deep.size()});
  nested.insert(nested.end(), deep.begin(), deep.end());
  EXPECT_NE(parse_error(nested, nested.size()).find("nested"), std::string::npos);
  // On disk: a file too short for the length prefix names the path.
  const std::string path = temp_path("short.safetensors");
  write_file(path, {1, 2, 3});
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "no error";
  } catch (const specdec::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace test_io_safetensors
