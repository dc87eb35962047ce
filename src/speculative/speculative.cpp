// The speculative strategy: its parameters, checked once, and the round loop's configuration.
// generate() is the round loop (loop.h) with one slot, generate_batch() with a slot per
// sequence: draft -> score -> verify -> accept -> roll back (Leviathan et al. 2023; Chen et al.
// 2023). p = target, q = draft, both after the same logits-processor chain, so the output
// follows the processed target distribution (greedy: exactly the greedy target tokens).
#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "sampling/grammar.h"
#include "speculative/loop.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "speculative/verifier.h"
#include "strategies/common.h"
#include "strategies/param_table.h"
#include "strategies/registry.h"

namespace specdec::strategies {
namespace {

constexpr int64_t k_max_gamma = 256;  // far beyond any useful draft length (4-8 typical)

class Speculative : public Strategy {
 public:
  // p: resolved (parse_speculative has checked everything here).
  explicit Speculative(const Params& p) {
    const SpeculativeParams& s = p.typed<SpeculativeParams>();
    cfg_.params = p;
    cfg_.gamma = s.gamma;
    cfg_.gamma_max = s.gamma_max;
    cfg_.adaptive = s.adaptive;
    cfg_.verify.block_verify = s.block_verify;
    cfg_.verify.proc = processor_config(p);
    cfg_.constraint = p.constraint();
    cfg_.forced_tokens = s.forced_tokens;
    cfg_.jump_forward = s.jump_forward;
    cfg_.synthetic = s.synthetic;
    resolve_costs(s);
  }

  // One request: the round loop with one slot (speculative/loop.cpp).
  Result generate(const Request& req, const TokenCallback& on_token) override {
    check_request(req);  // its own errors, not the batch's wording
    const std::vector<Request> one{req};
    const BatchTokenCallback each =
        on_token ? BatchTokenCallback([&](size_t, const Tokens& t, const std::string& text) { on_token(t, text); })
                 : BatchTokenCallback();
    return speculative_decode(setup(req.draft != nullptr), one, BatchOptions{1, 0}, each)[0];
  }
  // Chains and trees, through the same loop with a slot per sequence.
  std::vector<Result> generate_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                     const BatchTokenCallback& on_token) override {
    SD_CHECK(cfg_.synthetic.empty(), "speculative: synthetic_acceptance runs one sequence at a time (batch_size 1)");
    return speculative_decode(setup(!requests.empty() && requests[0].draft != nullptr), requests, options, on_token);
  }

 private:
  // The configuration with the drafters' names resolved (auto: by whether a draft model is
  // given), and a fixed table for each of them.
  SpecSetup setup(bool have_draft_model) const {
    SpecSetup s = cfg_;
    s.drafters = resolve_drafter_names(cfg_.params, have_draft_model);
    s.verify.drafter = join_names(s.drafters);
    if (fixed_.empty()) return s;
    for (const std::string& name : s.drafters) {
      const auto it = std::find_if(fixed_.begin(), fixed_.end(), [&](const StepCosts& c) { return c.drafter == name; });
      SD_CHECK(it != fixed_.end(), "speculative: controller_costs ", costs_path_, ": key 'drafter' = '",
               join_names(table_names()), "', but this run drafts with '", name, "' (calibrate with its drafter",
               s.drafters.size() > 1 ? "s: one table each" : "", ")");
      s.fixed_costs.push_back(std::make_shared<CostTable>(*it));
    }
    for (const StepCosts& c : fixed_)
      SD_CHECK(std::find(s.drafters.begin(), s.drafters.end(), c.drafter) != s.drafters.end(), "speculative: "
               "controller_costs ", costs_path_, ": key 'drafter' = '", c.drafter, "', but this run drafts with '",
               s.verify.drafter, "' only (one table per drafter of the run)");
    return s;
  }

  std::vector<std::string> table_names() const {
    std::vector<std::string> out;
    for (const StepCosts& c : fixed_) out.push_back(c.drafter);
    return out;
  }

  static std::string join_names(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
    return out;
  }

  // adaptive_gamma=cost's costs: fixed from controller_costs (read here, once), or measured in
  // this process (and written to controller_calibrate). Each mode says in the log whether its
  // decisions can be reproduced.
  void resolve_costs(const SpeculativeParams& s) {
    costs_path_ = s.controller_costs;
    cfg_.calibrate = s.controller_calibrate;
    if (cfg_.adaptive != GammaMode::cost) return;
    if (!costs_path_.empty()) {
      fixed_ = StepCosts::read_all(costs_path_);
      log::info("adaptive_gamma=cost with the fixed costs of ", costs_path_,
                ": its decisions depend on accept counts only, so seeded runs are reproducible");
    } else if (!cfg_.calibrate.empty()) {
      log::warn("adaptive_gamma=cost calibrating: the costs measured in this process go to ", cfg_.calibrate,
                " (for controller_costs); these decisions follow wall-clock timings, so with temperature > 0 the "
                "sampled tokens are NOT reproducible from the seed");
    } else if (!cfg_.verify.proc.greedy()) {
      // adaptive_gamma=cost without a fixed table is NOT reproducible from the seed when
      // temperature > 0. It picks gamma from measured wall-clock costs, and gamma decides which
      // positions are drafted (a draft sample, then accept/reject against the target, then a
      // residual sample) and which are plain bonus samples of the target, and how many uniforms
      // each round takes from the RNG. The law of the output is the target's for every gamma,
      // but the tokens drawn for a given seed are not: a different timing is a different
      // coupling. Greedy runs emit the target's argmax whatever gamma is (no warning). Said
      // once per process.
      static const bool warned =
          (log::warn("adaptive_gamma=cost chooses gamma from wall-clock timings: with temperature > 0 the sampled "
                     "tokens are not reproducible from the seed (greedy runs are; fix the costs with "
                     "controller_costs, or use off or hf, to reproduce)"),
           true);
      (void)warned;
    }
  }

  SpecSetup cfg_;  // params: resolved; the drafter reads its own parameters from them
  std::string costs_path_;  // controller_costs, for messages
  std::vector<StepCosts> fixed_;  // its tables (read once), one per drafter
};

// `drafter` choices for the help text: auto and the registered drafters.
std::string drafter_help() {
  std::string names = "auto";
  for (const auto& d : all_drafters()) names += " | " + d.name;
  return names + " (auto: model when a draft model is given, else ngram)";
}

StrategyNeeds speculative_needs(const Params& resolved, bool have_draft_model) {
  StrategyNeeds needs;
  const std::vector<std::string> names = resolve_drafter_names(resolved, have_draft_model);
  needs.drafter = names[0];
  for (const std::string& name : names)  // the first that needs a draft model names the need
    if (!needs.draft_model && find_drafter(name).needs_draft_model) {
      needs.drafter = name;
      needs.draft_model = true;
    }
  needs.draft_length = resolved.typed<SpeculativeParams>().gamma;
  return needs;
}

// The strategy's own parameters, each declared once; the drafters' join them (speculative_info).
ParamTable<SpeculativeParams> speculative_table() {
  using S = SpeculativeParams;
  return ParamTable<S>()
      .field("gamma", &S::gamma, "4", "draft tokens per round (start value when adaptive)")
      .field("gamma_max", &S::gamma_max, "8", "upper bound for adaptive gamma")
      .field("drafter", &S::drafter, "auto", drafter_help())
      .field("drafters", &S::drafters, "",
             "several drafters for one request, comma-separated (e.g. ngram,model; one value, not a sweep): "
             "adaptive_gamma=cost picks each round which one drafts and how many tokens, or none; each keeps its "
             "own cost table and acceptance ('' = the drafter parameter alone)")
      .field("adaptive_gamma", &S::adaptive_gamma, "off",
             "off | hf (+2 on full accept, -1 otherwise) | cost (expected tokens per ms from measured costs, 0 = "
             "step aside: plain decoding; NOT reproducible with temperature > 0 unless controller_costs fixes the "
             "costs)")
      .field("controller_costs", &S::controller_costs, "",
             "adaptive_gamma=cost: a cost table (JSON) written by controller_calibrate; the controller decides from "
             "it and accept counts alone, so seeded runs are reproducible ('' = measure in this process)")
      .field("controller_calibrate", &S::controller_calibrate, "",
             "adaptive_gamma=cost: write the costs measured in this process to this file after each generation, "
             "for controller_costs ('' = none); a calibrating run's own decisions are not reproducible")
      .field("verify", &S::verify, "tokenwise",
             "tokenwise | block (block verification of chains with a draft distribution, Sun et al. 2025)")
      .field("forced_tokens", &S::forced_tokens, "true",
             "structured output: the tokens the grammar forces (one admitted token) are drafted without the "
             "drafter, before its own draft (lossless: the masked target puts all its mass there)")
      .field("jump_forward", &S::jump_forward, "false",
             "structured output: the grammar's jump-forward text (what every continuation starts with) tokenised "
             "as the tokenizer does, its admitted tokens drafted without the drafter after the forced ones, and "
             "verified like any draft (the target may tokenise that text otherwise)")
      .field("draft_mask", &S::draft_mask, "true",
             "structured output: every drafter drafts inside the grammar: those that draw from rows (model, "
             "layer_skip, eagle, medusa, tree) mask them after their draft path (q is the masked law they draw "
             "from); the lookup drafters cut their proposals at the first refused token")
      .field("draft_lead", &S::draft_lead, "true",
             "structured output: where a model or layer_skip chain reaches the grammar's forced tokens (and, "
             "with jump_forward, its jump-forward text), those tokens join the chain (within its length) without a "
             "draft forward, "
             "verified like its draws (lossless: each has a one-hot q)")
      .field("draft_stop", &S::draft_stop, "0",
             "the model, layer_skip, eagle and medusa drafters' chains stop early once the draft's own odds that the "
             "whole chain is accepted (the product of the probabilities it gave its drawn tokens) fall below this "
             "(SpecDec++-style); trees (tree, and eagle/medusa's tree mode) grow no deeper once their likeliest "
             "path's odds do (lossless; 0 = off: every round drafts its full length)")
      .field("synthetic_acceptance", &S::synthetic_acceptance, "off",
             "off | a probability | a1,a2,... by child rank: BENCHMARKING THE LOOP ONLY, each draft node is "
             "accepted at random instead of verified (chains position by position with a1; trees child by child, "
             "the i-th child tried at a node with ai, the last value for all later ones); the tokens are NOT the "
             "target's, and every output carries synthetic_acceptance");
}

// `drafters`: registered names (not auto), at least two, each once, with adaptive_gamma=cost
// choosing between them and `drafter` left at auto.
std::vector<std::string> parse_drafter_list(const SpeculativeParams& s) {
  std::vector<std::string> out;
  if (s.drafters.empty()) return out;
  std::string item;
  for (size_t i = 0; i <= s.drafters.size(); ++i) {
    if (i < s.drafters.size() && s.drafters[i] != ',') {
      if (s.drafters[i] != ' ') item += s.drafters[i];
      continue;
    }
    SD_CHECK(!item.empty(), "speculative: drafters '", s.drafters, "': an empty name (expected e.g. ngram,model)");
    SD_CHECK(item != "auto", "speculative: drafters '", s.drafters, "': 'auto' is not a drafter; name each one");
    try {
      find_drafter(item);
    } catch (const Error& e) {
      fail("speculative: drafters '", s.drafters, "': ", e.what());
    }
    SD_CHECK(find_drafter(item).head_param.empty(), "speculative: drafters '", s.drafters, "': '", item,
             "' reads the target's features, which it would miss in the rounds it sits out; it drafts alone (drafter=",
             item, ")");
    SD_CHECK(std::find(out.begin(), out.end(), item) == out.end(), "speculative: drafters '", s.drafters, "': '",
             item, "' is named twice");
    out.push_back(item);
    item.clear();
  }
  SD_CHECK(out.size() >= 2, "speculative: drafters '", s.drafters, "' names one drafter; set drafter=", out[0],
           " for one, or list several");
  SD_CHECK(s.drafter == "auto", "speculative: drafter (", s.drafter, ") and drafters (", s.drafters,
           ") exclude each other");
  SD_CHECK(s.adaptive == GammaMode::cost, "speculative: drafters (", s.drafters, ") needs adaptive_gamma=cost, which "
           "chooses the drafter of each round; got adaptive_gamma=", s.adaptive_gamma);
  return out;
}

// StrategyInfo::parse: the strategy's struct and every drafter's, each checked once, before any
// model is loaded (`specdec validate` reports a bad value).
void parse_speculative(const ParamTable<SpeculativeParams>& table, Params& p) {
  SpeculativeParams s = table.parse(p);
  s.adaptive = parse_gamma_mode(s.adaptive_gamma);
  SD_CHECK(s.verify == "tokenwise" || s.verify == "block", "speculative: verify must be tokenwise or block, got '",
           s.verify, "'");
  s.block_verify = s.verify == "block";
  SD_CHECK(s.draft_stop >= 0 && s.draft_stop <= 1, "speculative: draft_stop must be in [0, 1], got ", s.draft_stop);
  // The drafter name and every drafter's parameters.
  parse_drafter_params(p, s.drafter);
  s.drafter_list = parse_drafter_list(s);
  SD_CHECK(s.gamma >= 0 && s.gamma_max >= std::max<int64_t>(s.gamma, 1),
           "speculative: need 0 <= gamma <= gamma_max and gamma_max >= 1, got gamma=", s.gamma,
           " gamma_max=", s.gamma_max);
  // Each round sizes buffers and the KV cache by gamma_max: bound it before anything is allocated.
  SD_CHECK(s.gamma_max <= k_max_gamma, "speculative: gamma_max=", s.gamma_max, " (gamma=", s.gamma,
           ") exceeds the limit of ", k_max_gamma, " draft tokens per round");
  if (s.adaptive != GammaMode::cost)
    SD_CHECK(s.controller_costs.empty() && s.controller_calibrate.empty(), "speculative: controller_costs and "
             "controller_calibrate need adaptive_gamma=cost, got adaptive_gamma=", s.adaptive_gamma);
  else
    SD_CHECK(s.controller_costs.empty() || s.controller_calibrate.empty(), "speculative: controller_costs (fixed "
             "costs, '", s.controller_costs, "') and controller_calibrate (measured costs, '", s.controller_calibrate,
             "') exclude each other");
  if (s.synthetic_acceptance != "off") s.synthetic = parse_synthetic(s.synthetic_acceptance);
  // verify=block with a drafter that never proposes chains with q, known before any model is
  // loaded (`specdec validate`); "auto" is checked per round (verify_mode), as it depends on
  // whether a draft model is given.
  if (s.block_verify && !processor_config(p).greedy()) {
    std::vector<std::string> named = s.drafter_list;
    if (named.empty() && s.drafter != "auto") named = {s.drafter};
    for (const std::string& name : named)
      if (!find_drafter(name).chains_with_q)
        refuse_block_verify(name, "proposes none at temperature " + p.values().at("temperature"));
  }
  p.set_typed(std::move(s));
}

}  // namespace

// The strategy's own parameters, then every drafter's (drafter_params()), so `--set
// ngram_max=5` is validated and defaulted like any other speculative parameter.
StrategyInfo speculative_info() {
  StrategyInfo info;
  info.name = "speculative";
  info.description = "speculative decoding: a drafter (draft model, n-gram or suffix lookup, ...) proposes "
                     "up to gamma tokens, the target verifies";
  const ParamTable<SpeculativeParams> table = speculative_table();
  info.params = table.specs();
  info.parse = [table](Params& p) { parse_speculative(table, p); };
  for (const auto& p : drafter_params()) {
    for (const auto& own : info.params)
      SD_CHECK(own.name != p.name, "drafter parameter '", p.name, "' clashes with a speculative parameter");
    info.params.push_back(p);
  }
  info.factory = [](const Params& p) { return std::make_unique<Speculative>(p); };
  info.needs = speculative_needs;
  info.takes_constraint = true;
  return info;
}

}  // namespace specdec::strategies
