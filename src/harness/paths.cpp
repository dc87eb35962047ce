#include "harness/paths.h"

#include <cstdlib>
#include <filesystem>

namespace specdec::harness {

namespace fs = std::filesystem;

std::string source_root() {
  if (const char* e = std::getenv("SPECDEC_ROOT"); e && *e) return e;
#ifdef SPECDEC_SOURCE_DIR
  return SPECDEC_SOURCE_DIR;
#else
  return fs::current_path().string();
#endif
}

std::string resolve_data_path(const std::string& path, const std::string& experiment_file) {
  // The non-throwing exists(): a name the OS refuses (too long, a loop of links) counts as
  // absent, so the caller's "not found" names the key instead of a bare filesystem_error.
  std::error_code ec;
  const fs::path p(path);
  if (p.is_absolute() || fs::exists(p, ec)) return path;
  const fs::path beside = fs::path(experiment_file).parent_path() / p;
  if (fs::exists(beside, ec)) return beside.string();
  const fs::path from_root = fs::path(source_root()) / p;
  if (fs::exists(from_root, ec)) return from_root.string();
  return path;
}

}  // namespace specdec::harness
