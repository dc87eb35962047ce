// libFuzzer entry point for the GGUF reader: parse arbitrary bytes, then touch every
// metadata accessor path and dequantise every tensor. Only specdec::Error may escape
// the parser; ASan/UBSan catch out-of-bounds reads and undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = specdec::io::GgufFile::parse(data, size, "fuzz.gguf");
    (void)f->summary();
    for (const auto& [key, value] : f->metadata()) {
      (void)f->get_int_or(key, 0);
      (void)value.is_integer();
    }
    std::vector<float> out;
    for (const auto& t : f->tensors()) {
      out.resize(static_cast<size_t>(t.n_elements()));
      try {
        f->read_f32(t, out.data());
      } catch (const specdec::Error&) {
        // unsupported quant type: expected
      }
    }
  } catch (const specdec::Error&) {
  }
  return 0;
}
