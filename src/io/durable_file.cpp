// Durable and atomic file writes (durable_file.h).
#include "io/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace specdec::io {

namespace {
void write_all_and_sync(int fd, const std::string& path, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      fail("cannot write '", path, "': ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("cannot fsync '", path, "': ", std::strerror(errno));
  }
  ::close(fd);
}
}  // namespace

void append_durable(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  SD_CHECK(fd >= 0, "cannot open '", path, "' for appending: ", std::strerror(errno));
  write_all_and_sync(fd, path, text);
}

void write_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_TRUNC | O_CREAT | O_CLOEXEC, 0644);
  SD_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  write_all_and_sync(fd, tmp, text);
  SD_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "': ",
           std::strerror(errno));
}

}  // namespace specdec::io
