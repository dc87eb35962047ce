// The one test file compiled with the checkout's and the build folder's absolute paths
// (tests/CMakeLists.txt, library specdec_test_paths); every test asks it (tests/support/paths.h).
#include "tests/support/paths.h"

namespace specdec::testing_support {

std::string source_dir() { return SPECDEC_SOURCE_DIR; }
std::string binary_dir() { return SPECDEC_BINARY_DIR; }

}  // namespace specdec::testing_support
