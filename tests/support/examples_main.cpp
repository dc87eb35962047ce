// main() of the test executables that reach the worked examples of examples/ (tests_strategies,
// tests_harness; tests/CMakeLists.txt), in place of gtest's: it registers them first, before
// anything reads the registries, as a user's main() registers theirs (examples/main.cpp).
#include <gtest/gtest.h>

#include "examples/register.h"

int main(int argc, char** argv) {
  specdec::examples::register_examples();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
