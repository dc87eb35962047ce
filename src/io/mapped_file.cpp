#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace specdec::io {

void* map_file(const std::string& format, const std::string& path, size_t min_size,
               const std::string& what_header, size_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(format, " ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(format, " ", path, ": not a regular file");
  }
  size = static_cast<size_t>(st.st_size);
  if (size < min_size) {
    ::close(fd);
    fail(format, " ", path, ": file of ", size, " bytes is too small for ", what_header);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail(format, " ", path, ": mmap failed: ", std::strerror(errno));
  return map;
}

void drop_mapped_pages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)), begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t b = (begin + page - 1) / page * page, e = (begin + bytes) / page * page;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace specdec::io
