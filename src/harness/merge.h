#pragma once
// Shards of one prompt-interleaved experiment (the same YAML but for prompts.range or
// prompts.categories, run on several machines) merged into one run folder: config.yaml lists
// every shard's prompts, samples.jsonl and units.jsonl hold every finished prompt. The merged
// folder is then an ordinary run: `specdec run --resume` on it recomputes the figures and the
// report from the samples (and would run whatever prompts no shard finished).
#include <string>
#include <vector>

#include "harness/experiment.h"

namespace specdec::harness {

// Writes the merged folder `out` (which must not hold a run) and returns its configuration.
// Errors name the shard: not a run folder, not interleave: prompt, a setting that differs
// from the first shard's (the first differing line of the resolved config), or a prompt id
// present in two shards.
ExperimentConfig merge_shards(const std::vector<std::string>& shards, const std::string& out);

}  // namespace specdec::harness
