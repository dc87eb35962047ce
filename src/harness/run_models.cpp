// The runner's models and prompts: loading and encoding (run_models.h).
#include "harness/run_models.h"

#include "harness/model_catalog.h"
#include "tokenizer/tokenizer.h"

namespace specdec::harness {

namespace {

model::LoadedModel load_one(const ModelChoice& m, bool oversubscribe) {
  model::ModelSpec spec = resolve_model(m.name);
  spec.options() = m;
  spec.threads_oversubscribe = oversubscribe;
  return model::load(spec);
}

}  // namespace

Models load_models(const ExperimentConfig& cfg, bool oversubscribe) {
  model::set_threads(cfg.target.threads, oversubscribe);
  Models m;
  m.target = load_one(cfg.target, oversubscribe);
  if (cfg.draft) {
    const auto& d = *cfg.draft;
    // Self-drafting: the same weights serve both roles; each strategy run has its own caches.
    const bool same = d.name == cfg.target.name && d.dtype == cfg.target.dtype && d.seed == cfg.target.seed &&
                      d.device == cfg.target.device && d.engine == cfg.target.engine &&
                      d.graphs == cfg.target.graphs;
    m.draft = same ? m.target : load_one(d, oversubscribe);
  }
  return m;
}

Tokens encode_prompt(const PromptItem& p, const model::LoadedModel& m) {
  if (!m.tokenizer) {
    Tokens t;
    const int64_t v = m.model->config().n_vocab;
    for (unsigned char c : p.text) t.push_back(static_cast<TokenId>(c % v));
    return t;
  }
  const std::string text = p.chat ? m.tokenizer->apply_chat_template({{"user", p.text}}, true) : p.text;
  return m.tokenizer->encode(text, true);
}

std::string decode_text(const Tokens& t, const model::LoadedModel& m) {
  if (m.tokenizer) return m.tokenizer->decode(t, true);
  std::string s;
  for (TokenId id : t) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace specdec::harness
