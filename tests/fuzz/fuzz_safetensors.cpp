// libFuzzer entry point for the safetensors reader: parse arbitrary bytes and convert
// every tensor to fp32. Only specdec::Error may escape.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = specdec::io::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    std::vector<float> out;
    for (const auto& [name, t] : f->tensors()) {
      out.resize(static_cast<size_t>(t.n_elements()));
      try {
        f->read_f32(t, out.data());
      } catch (const specdec::Error&) {
        // integer dtypes cannot be converted: expected
      }
    }
  } catch (const specdec::Error&) {
  }
  return 0;
}
