// DraftProposal helpers. The drafters themselves live in drafters/ (one file each) and are
// listed in drafters/registry.cpp.
#include "strategies/drafters.h"

#include "core/error.h"

namespace specdec::strategies {

int64_t DraftProposal::depth(int64_t i) const {
  SD_CHECK(i >= 0 && i < size(), "draft node ", i, " is outside the proposal of ", size(), " nodes");
  if (is_chain()) return i + 1;
  int64_t d = 1;
  // parents[j] < j (topological order), so this walk ends at a root within i steps.
  for (int32_t j = parents[i]; j >= 0; j = parents[j]) ++d;
  return d;
}

}  // namespace specdec::strategies
