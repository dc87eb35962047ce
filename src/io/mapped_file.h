#pragma once
// Read-only memory mapping of a whole file, shared by the GGUF and safetensors readers.
#include <cstddef>
#include <string>

namespace specdec::io {

// Maps `path` read-only and returns its base; `size` receives the file size. `format` names
// the reader in errors ("gguf", "safetensors"); a file smaller than min_size (the format's
// fixed header) is an error that names `what_header`. Unmap with ::munmap(base, size).
void* map_file(const std::string& format, const std::string& path, size_t min_size,
               const std::string& what_header, size_t& size);

// Drops the resident pages wholly inside [data, data + bytes) of a read-only file mapping
// (MADV_DONTNEED), once their contents have been copied elsewhere, so that they do not add to
// the process's RSS; a later read faults them in from the file again.
void drop_mapped_pages(const void* data, size_t bytes);

}  // namespace specdec::io
