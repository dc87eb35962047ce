// layer_skip: self-speculation (Draft & Verify, Zhang et al. 2024; SWIFT, Xia et al. 2025).
// The draft model is the target itself with some layers skipped (model/layer_subset.h): the
// same weights, no second copy, its own KV cache. The skip set is given (skip_layers), or
// searched on the prompt as SWIFT does: candidate sets of round(skip_ratio * n_layers) layers
// (never the first or the last) are scored by how often the skipped model's argmax agrees
// with the full model's on the prompt's last positions, and the best one is kept.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "model/config_limits.h"
#include "model/layer_subset.h"
#include "sampling/processors.h"
#include "strategies/common.h"
#include "speculative/proposer.h"
#include "speculative/drafters/model.h"

namespace specdec::strategies {
namespace {

std::vector<int64_t> parse_skip(const std::string& text, int64_t n_layers) {
  const std::vector<int64_t> listed = parse_int_list("layer_skip", "skip_layers", text, 0, n_layers - 1);
  const std::set<int64_t> skip(listed.begin(), listed.end());
  SD_CHECK(static_cast<int64_t>(skip.size()) < n_layers, "layer_skip: skip_layers = '", text,
           "' skips every layer; keep at least one");
  std::vector<int64_t> keep;
  for (int64_t l = 0; l < n_layers; ++l)
    if (!skip.count(l)) keep.push_back(l);
  return keep;
}

// Fraction of positions whose argmax under `keep` equals the full model's (`full`: [T]).
double agreement(model::CausalLM& target, const at::Tensor& ids /* [1, T] */, const at::Tensor& full,
                 const std::vector<int64_t>& keep) {
  model::KVCache cache = target.make_cache(1, ids.size(1));
  model::ForwardOptions opt;
  opt.layers = keep;
  const at::Tensor guess = sampling::argmax_rows(target.forward(ids, {0}, cache, opt).logits[0]);  // [T]
  return guess.eq(full).to(at::kDouble).mean().item<double>();
}

// SWIFT-style search on the prompt's last (up to) 48 tokens.
std::vector<int64_t> search_keep(const DrafterContext& ctx, double ratio, int64_t n_candidates) {
  model::CausalLM& target = *ctx.request.target;
  const int64_t L = target.config().n_layers;
  const int64_t n_skip = std::min<int64_t>(L - 2, std::llround(ratio * L));
  std::vector<int64_t> all(L);
  std::iota(all.begin(), all.end(), 0);
  if (n_skip <= 0) return all;
  const Tokens& prompt = ctx.request.prompt;
  const int64_t T = std::min<int64_t>(48, static_cast<int64_t>(prompt.size()));
  at::Tensor ids = at::empty({1, T}, at::kLong);
  for (int64_t i = 0; i < T; ++i) ids[0][i] = prompt[prompt.size() - T + i];
  model::KVCache cache = target.make_cache(1, T);
  const at::Tensor full = sampling::argmax_rows(target.forward(ids, {0}, cache)[0]);  // [T]
  // Candidate 0 spreads the skipped layers evenly over the middle; the rest are seeded draws.
  std::vector<std::vector<int64_t>> skips;
  std::vector<int64_t> even;
  for (int64_t i = 0; i < n_skip; ++i) even.push_back(1 + (i * (L - 2)) / n_skip);
  skips.push_back(even);
  Rng rng(ctx.request.seed ^ 0x5e1f5eedULL);
  std::vector<int64_t> middle(all.begin() + 1, all.end() - 1);
  for (int64_t c = 1; c < n_candidates; ++c) {
    for (int64_t i = static_cast<int64_t>(middle.size()) - 1; i > 0; --i)
      std::swap(middle[i], middle[static_cast<int64_t>(rng.uniform() * (i + 1)) % (i + 1)]);
    skips.emplace_back(middle.begin(), middle.begin() + n_skip);
  }
  std::vector<int64_t> best;
  double best_score = -1;
  for (const auto& skip : skips) {
    std::vector<int64_t> keep;
    for (int64_t l = 0; l < L; ++l)
      if (std::find(skip.begin(), skip.end(), l) == skip.end()) keep.push_back(l);
    const double score = agreement(target, ids, full, keep);
    if (score > best_score) best_score = score, best = keep;
  }
  log::debug("layer_skip: kept ", best.size(), " of ", L, " layers, prompt agreement ", best_score);
  return best;
}

// Ranges and the skip list's syntax before any model is loaded (the layer count is checked
// against the target in make_layer_skip).
struct LayerSkipParams {
  std::string skip_layers;  // as given ('' = search); checked against the target's layers when built
  double ratio = 0;
  int64_t n_candidates = 0;
};

void check_layer_skip_params(LayerSkipParams& p) {
  SD_CHECK(p.ratio >= 0 && p.ratio < 1, "layer_skip: skip_ratio = ", p.ratio, " must be in [0, 1)");
  SD_CHECK(p.n_candidates >= 1 && p.n_candidates <= 256, "layer_skip: skip_search = ", p.n_candidates,
           " must be in [1, 256]");
  if (!p.skip_layers.empty()) parse_skip(p.skip_layers, model::k_max_layers);
}

// The layers this request's draft keeps: given, or searched on its prompt.
std::vector<int64_t> layers_to_keep(const DrafterContext& ctx) {
  SD_CHECK(ctx.request.target != nullptr, "layer_skip: needs a target model");
  const LayerSkipParams& p = ctx.params.typed<LayerSkipParams>();
  const int64_t L = ctx.request.target->config().n_layers;
  return p.skip_layers.empty() ? search_keep(ctx, p.ratio, p.n_candidates) : parse_skip(p.skip_layers, L);
}

std::unique_ptr<Drafter> make_layer_skip(const DrafterContext& ctx) {
  return make_model_drafter(model::make_layer_subset(ctx.request.target, layers_to_keep(ctx)), ctx);
}

// In a batch, sequences whose searches keep the same layers draft with one subset view, so
// they share each draft forward (the others get a forward per distinct set).
std::unique_ptr<BatchDrafter> make_layer_skip_batch(const Request& first, const Params&,
                                                    const sampling::ProcessorConfig& proc, int64_t batch,
                                                    int64_t capacity) {
  auto views = std::make_shared<std::map<std::vector<int64_t>, std::shared_ptr<model::CausalLM>>>();
  auto model_of = [views](const DrafterContext& ctx) {
    const std::vector<int64_t> keep = layers_to_keep(ctx);
    std::shared_ptr<model::CausalLM>& view = (*views)[keep];
    if (!view) view = model::make_layer_subset(ctx.request.target, keep);
    return view;
  };
  return make_model_batch_drafter(model_of, first.target, proc, batch, capacity);
}

}  // namespace

DrafterInfo layer_skip_drafter_info() {
  DrafterInfo info;
  info.name = "layer_skip";
  info.chains_with_q = true;
  info.description = "self-speculation: the target with some layers skipped drafts (shared weights; skip set "
                     "given or searched on the prompt, SWIFT-style)";
  using L = LayerSkipParams;
  declare_params(info, ParamTable<L>()
                           .field("skip_layers", &L::skip_layers, "",
                                  "comma-separated layer indices to skip; empty = search on the prompt")
                           .field("skip_ratio", &L::ratio, "0.4", "search: fraction of layers to skip")
                           .field("skip_search", &L::n_candidates, "12", "search: candidate skip sets scored on the prompt")
                           .finish(check_layer_skip_params));
  info.factory = make_layer_skip;
  info.batch_factory = make_layer_skip_batch;
  return info;
}

}  // namespace specdec::strategies
