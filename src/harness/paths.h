#pragma once
// Where the harness finds data files named in experiments (prompt files, scripts).
#include <string>

namespace specdec::harness {

// The repository root: $SPECDEC_ROOT if set, else the source dir this library was built from.
std::string source_root();

// A relative path as written in an experiment: tried from the working directory, then next to
// the experiment file, then from the repository root. Returns the first that exists (or the
// path as given when none does, so the caller's "not found" names what the user wrote).
std::string resolve_data_path(const std::string& path, const std::string& experiment_file);

}  // namespace specdec::harness
