#pragma once
// The YAML form of `specdec train-drafter` (configs/drafters/*.yaml): the command's options as
// keys (with _ for -), plus model and dtype. Parsed here, once, into train::TrainOptions; no
// YAML type leaves src/harness (DESIGN principle 4).
#include <string>
#include <vector>

#include "train/drafter_training.h"

namespace specdec::harness {

struct TrainConfig {
  std::string model;           // catalog name or path of the target
  std::string dtype = "auto";  // the target's weights
  train::TrainOptions options;
};

// Reads `path`; `overrides` are key=value strings (--set) applied over the file's keys.
// Unknown keys and bad values are errors naming the file, the key and the value. A relative
// `out` or `corpus` entry is relative to the current directory, as on the command line.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Copies one option, named as on the command line ("seq-len"), from src to dst.
void apply_train_option(train::TrainOptions& dst, const std::string& cli_key, const train::TrainOptions& src);

}  // namespace specdec::harness
