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

}  // namespace specdec::io
