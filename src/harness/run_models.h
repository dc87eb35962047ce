#pragma once
// The runner's models and prompts (runner.h): the experiment's target and draft, loaded once
// for the whole run, and its prompts encoded with the target's tokenizer.
#include <optional>
#include <string>

#include "core/types.h"
#include "harness/experiment.h"
#include "model/causal_lm.h"

namespace specdec::harness {

struct Models {
  model::LoadedModel target;
  std::optional<model::LoadedModel> draft;
};

// Sets the engine's threads (the target's models.threads) and loads the models; a draft with
// the target's weights and settings is the target itself (self-drafting).
Models load_models(const ExperimentConfig& cfg, bool oversubscribe);

struct EncodedPrompt {
  const PromptItem* item;  // its text and follow-up turns
  Tokens tokens;           // the first turn, encoded
};

// Tokenizer-less models (tiny random ones) read the prompt's bytes modulo the vocabulary.
Tokens encode_prompt(const PromptItem& p, const model::LoadedModel& m);
// The tokens as text; tokenizer-less models: the ids, space-separated.
std::string decode_text(const Tokens& t, const model::LoadedModel& m);

}  // namespace specdec::harness
