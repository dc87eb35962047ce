#pragma once
// Where the tests find the checkout (models/, configs/, experiments/, tests/fixtures/) and the
// build folder (build/specdec). The two absolute paths are compiled into tests/support/paths.cpp
// alone, so that no other test file's command line holds one and a compiler cache hits for a
// clone at another path (scripts/build.sh, CCACHE_BASEDIR).
#include <string>

namespace specdec::testing_support {

std::string source_dir();  // the checkout, e.g. source_dir() + "/models/smollm2-135m-instruct.gguf"
std::string binary_dir();  // the build folder, e.g. binary_dir() + "/specdec"

}  // namespace specdec::testing_support
