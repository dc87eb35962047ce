#pragma once
// Trained drafters (DrafterInfo::head_param) in tests that run every registered drafter: an
// untrained head for the test's target, written once per (target, kind) into the test's
// temporary directory, in a folder named with the process id (test programs run side by side
// under ctest -j: each writes its own) and removed when the program ends. Untrained heads draft poorly, which is what a losslessness test wants:
// many rejections.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "model/draft_heads.h"
#include "speculative/proposer.h"

namespace specdec::test_support {

// {head_param: directory} for drafter d on target (empty for drafters without a head).
inline std::map<std::string, std::string> fresh_head_values(const strategies::DrafterInfo& d,
                                                            const model::CausalLM& target) {
  if (d.head_param.empty()) return {};
  struct Written {  // the folders, removed when the test program ends
    std::map<std::pair<const void*, std::string>, std::string> dirs;
    ~Written() {
      std::error_code ec;
      for (const auto& entry : dirs) std::filesystem::remove_all(entry.second, ec);
    }
  };
  static Written written;
  std::string& dir = written.dirs[{&target, d.head_kind}];
  if (dir.empty()) {
    dir = ::testing::TempDir() + "/specdec_fresh_" + std::to_string(::getpid()) + "_" + d.head_kind + "_" +
          std::to_string(written.dirs.size());
    model::DraftHead::fresh(target, d.head_kind, "test target", 1).save(dir);
  }
  return {{d.head_param, dir}};
}

}  // namespace specdec::test_support
