#pragma once
// Errors: every user-facing failure is a specdec::Error whose message names the
// file, key or value at fault. The CLI prints it and exits non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace specdec {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown for a failed correctness check (exit code 2 in the CLI), as opposed to bad input.
class CheckFailed : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... A>
std::string concat(A&&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

// fail("file ", path, ": expected ", n, " bytes") throws specdec::Error.
template <class... A>
[[noreturn]] void fail(A&&... parts) {
  throw Error(detail::concat(std::forward<A>(parts)...));
}

}  // namespace specdec

// SD_CHECK(cond, "message parts", ...) throws specdec::Error when cond is false.
#define SD_CHECK(cond, ...)                    \
  do {                                         \
    if (!(cond)) ::specdec::fail(__VA_ARGS__); \
  } while (0)
