#pragma once
// Appends GGUF encodings to a byte buffer (value type ids as in the GGUF spec), for tests that
// craft GGUF files: the reader's unit tests and the bad-input table.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::testing {

struct GgufWriter {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    str(k);
    put<uint32_t>(type);
  }
  void pad_to(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
  }
};

}  // namespace specdec::testing
