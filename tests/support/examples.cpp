// The worked examples of examples/ (annealed, repeat_last), registered in the test executables
// that reach them (tests_strategies, tests_harness; tests/CMakeLists.txt) before gtest's main()
// runs, as a user's main() registers theirs first (examples/main.cpp).
#include "examples/register.h"

namespace {
[[maybe_unused]] const bool registered = (specdec::examples::register_examples(), true);
}  // namespace
