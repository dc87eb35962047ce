// The ASan + UBSan build (scripts/build.sh --sanitize, CI's last stage) is there to find memory
// errors and undefined behaviour along the code paths the unit tests take; the statistical power
// of a test is the main build's business, where every test keeps its full sample count. A test
// whose time is its sample count may draw fewer under the sanitizers with `sanitizer_scaled`, but
// only where it asserts that a law holds (or that two implementations agree draw by draw): a test
// that must catch a planted bug keeps its count everywhere, since catching it needs the power.
// A test whose subject is a test's own reference (tests/reference: its exact laws, its planted
// bugs) may skip under the sanitizers (GTEST_SKIP when kSanitized) where another test walks the
// library code it reaches beside the same reference.
#pragma once

#include <cstdint>

namespace specdec::test_support {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// n in the main build; n / divisor in the sanitizer build.
constexpr int64_t sanitizer_scaled(int64_t n, int64_t divisor) { return kSanitized ? n / divisor : n; }

}  // namespace specdec::test_support
