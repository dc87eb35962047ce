#pragma once
// Shards of one experiment run on several machines, merged into one run folder:
// - interleave: prompt (Spec-Bench's layout): the same YAML but for prompts.range or
//   prompts.categories; config.yaml lists every shard's prompts, samples.jsonl and units.jsonl
//   hold every finished prompt.
// - interleave: cell: the same YAML, each shard run with `specdec run --cells A:B` (a range of
//   the planned cells); cells.jsonl and samples.jsonl hold every finished cell.
// The merged folder is then an ordinary run: `specdec run --resume` on it recomputes the
// figures and the report from the records (and would run whatever no shard finished).
// `specdec run --executor slurm` runs its array tasks as such shards (harness/slurm.h).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/experiment.h"

namespace specdec::harness {

// Writes the merged folder `out` (which must not hold a run) and returns its configuration.
// Errors name the shard: not a run folder, a setting that differs from the first shard's (the
// first differing line of the resolved config), or a prompt id or cell present in two shards.
ExperimentConfig merge_shards(const std::vector<std::string>& shards, const std::string& out);

// Which node ran what, for the merged env.json's "shards": per shard its folder, its
// env.json (host name, Slurm job, CPU, load, times) and the cell keys or prompt ids it finished.
nlohmann::json describe_shards(const std::vector<std::string>& shards);

}  // namespace specdec::harness
