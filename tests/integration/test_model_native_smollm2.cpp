// dtype native on SmolLM2-135M (GGUF Q4_1 projections, Q8_0 tied embedding, arch "llama":
// interleaved q/k rows): logits bit-identical to float32 on the same file.
#include <filesystem>

#include "native_equals_float32.h"

TEST(NativeSmolLM2, LogitsBitIdenticalToFloat32) {
  const std::string path = SPECDEC_SOURCE_DIR "/models/smollm2-135m-instruct.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
  specdec::testing_native::expect_native_equals_float32(path);
}
