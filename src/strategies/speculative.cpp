// speculative: draft -> verify -> accept -> roll back (Leviathan et al. 2023; Chen et al. 2023).
// p = target, q = draft, both after the same logits-processor chain, so the output follows
// the processed target distribution (greedy: exactly the greedy target tokens).
#include "strategies/speculative.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/backend.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "strategies/common.h"
#include "strategies/drafters.h"
#include "strategies/registry.h"
#include "strategies/trace.h"
#include "tokenizer/tokenizer.h"

namespace specdec::strategies {
namespace {

struct SpecConfig {
  int64_t gamma = 4, gamma_max = 8;
  std::string adaptive = "off";
  std::vector<double> synthetic;  // synthetic_acceptance by child rank; empty: off (verification decides)
  VerifySetup verify;  // processors, verify=block, the drafter's name
};

class Speculative : public Strategy {
 public:
  explicit Speculative(const Params& p) : params_(p) {
    cfg_.gamma = p.get_int("gamma");
    cfg_.gamma_max = p.get_int("gamma_max");
    cfg_.adaptive = p.get_string("adaptive_gamma");
    const std::string verify_mode = p.get_string("verify");
    SD_CHECK(verify_mode == "tokenwise" || verify_mode == "block",
             "speculative: verify must be tokenwise or block, got '", verify_mode, "'");
    cfg_.verify.block_verify = verify_mode == "block";
    cfg_.verify.proc = processor_config(p);
    constraint_ = sampling::Constraint::from_params(p.values());
    // The drafter name and every drafter's parameters, before any model is loaded.
    check_drafter_params(p);
    SD_CHECK(cfg_.gamma >= 0 && cfg_.gamma_max >= std::max<int64_t>(cfg_.gamma, 1),
             "speculative: need 0 <= gamma <= gamma_max and gamma_max >= 1, got gamma=", cfg_.gamma,
             " gamma_max=", cfg_.gamma_max);
    // Each round sizes buffers and the KV cache by gamma_max: bound it before anything is allocated.
    SD_CHECK(cfg_.gamma_max <= k_max_gamma, "speculative: gamma_max=", cfg_.gamma_max, " (gamma=", cfg_.gamma,
             ") exceeds the limit of ", k_max_gamma, " draft tokens per round");
    SD_CHECK(cfg_.adaptive == "off" || cfg_.adaptive == "hf" || cfg_.adaptive == "cost",
             "speculative: adaptive_gamma must be off, hf or cost, got '", cfg_.adaptive, "'");
    if (const std::string syn = p.get_string("synthetic_acceptance"); syn != "off")
      cfg_.synthetic = parse_synthetic(syn);
    // verify=block with a drafter that never proposes chains with q, known before any model is
    // loaded (`specdec validate`); "auto" is checked per round (verify_mode), as it depends on
    // whether a draft model is given.
    const std::string drafter = p.get_string("drafter");
    if (cfg_.verify.block_verify && !cfg_.verify.proc.greedy() && drafter != "auto" &&
        !find_drafter(drafter).chains_with_q)
      refuse_block_verify(drafter, "proposes none at temperature " + p.get_string("temperature"));
  }

  static constexpr int64_t k_max_gamma = 256;  // far beyond any useful draft length (4-8 typical)

  Result generate(const Request& req, const TokenCallback& on_token) override;
  // Chains and trees, through speculative_decode_batch (speculative_batch.cpp).
  std::vector<Result> generate_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                     const BatchTokenCallback& on_token) override {
    SD_CHECK(cfg_.synthetic.empty(), "speculative: synthetic_acceptance runs one sequence at a time (batch_size 1)");
    // Structured output: each request alone for now (one matcher per sequence), the same
    // tokens as batched runs would give.
    if (constraint_) return Strategy::generate_batch(requests, options, on_token);
    VerifySetup verify = cfg_.verify;
    verify.drafter = resolve_drafter_name(params_, !requests.empty() && requests[0].draft != nullptr);
    const SpecBatchSetup setup{verify, cfg_.gamma, cfg_.gamma_max, cfg_.adaptive, params_};
    return speculative_decode_batch(setup, requests, options, on_token);
  }

 private:
  SpecConfig cfg_;
  Params params_;  // resolved; the drafter reads its own parameters from them
  std::shared_ptr<const sampling::Constraint> constraint_;  // structured output; null: none
};

}  // namespace

// The target's view of a tree round: the last committed token is fed first (the root), so
// node i is fed token i + 1 and its parent moves up by one.
model::ForwardOptions tree_forward_options(const DraftProposal& d, const at::Device& target) {
  model::ForwardOptions opt;
  if (d.drawn_parents.defined()) {  // unread: the same entries, on the target's device
    const at::Tensor par = d.drawn_parents_on(target);
    opt.device_parents = at::cat({at::full({1}, -1, par.options()), par + 1});
    return opt;
  }
  opt.parents.push_back(-1);
  for (int32_t parent : d.parents) opt.parents.push_back(parent + 1);
  return opt;
}

at::Tensor target_probabilities(const at::Tensor& logits, const sampling::ProcessorConfig& proc, const Tokens& seq,
                                const DraftProposal& d) {
  if (!d.drawn.defined() || proc.repetition_penalty == 1.0)  // only the penalty reads the draft
    return sampling::probabilities(logits, proc, seq, d.tokens, d.parents);
  sampling::DeviceDraft draft;
  draft.tokens = d.drawn_on(logits.device());
  if (d.drawn_parents.defined())
    draft.parents = d.drawn_parents_on(logits.device());
  else if (!d.parents.empty())  // a static tree: its shape on the host
    draft.parents =
        model::to_device_async(at::tensor(std::vector<int64_t>(d.parents.begin(), d.parents.end())), logits.device());
  return sampling::probabilities(logits, proc, seq, draft);
}

namespace {
// What a round's target forward feeds: the last committed token, then the draft ([k + 1]
// int64). A draft still on the draft model's device (a chain or a static tree) is fed from
// there (DraftProposal::drawn_on).
at::Tensor fed_tokens(TokenId last, const DraftProposal& d, const at::Device& target) {
  if (!d.drawn.defined()) {
    Tokens fed = {last};
    fed.insert(fed.end(), d.tokens.begin(), d.tokens.end());
    return at::tensor(std::vector<int64_t>(fed.begin(), fed.end()), at::kLong);
  }
  const at::Tensor drawn = d.drawn_on(target);
  return at::cat({at::full({1}, static_cast<int64_t>(last), drawn.options()), drawn});
}
}  // namespace

at::Tensor top_token_ids(const at::Tensor& logits, int64_t k) {
  // k = 1 is the argmax: take the project's one (ties -> lowest id), which at::topk does not
  // promise.
  return model::to_host_async(k == 1 ? sampling::argmax_rows(logits).unsqueeze(1)
                                     : std::get<1>(at::topk(logits, std::min<int64_t>(k, logits.size(1)), 1)));
}

std::vector<Tokens> token_rows(const at::Tensor& ids_in) {
  const at::Tensor ids = ids_in.contiguous();  // [n, k]
  std::vector<Tokens> out(ids.size(0));
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < ids.size(0); ++r) out[r].assign(p + r * ids.size(1), p + (r + 1) * ids.size(1));
  return out;
}

// Longest root-to-leaf path of a proposal (a chain: its length).
int64_t max_depth(const DraftProposal& d) {
  int64_t deepest = 0;
  for (int64_t i = 0; i < d.size(); ++i) deepest = std::max(deepest, d.depth(i));
  return deepest;
}

std::vector<double> parse_synthetic(const std::string& text) {
  std::vector<double> ranks;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double a = -1;
    try {
      a = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SD_CHECK(!item.empty() && used == item.size() && a >= 0.0 && a <= 1.0, "speculative: synthetic_acceptance = '",
             text, "': entry '", item, "' must be a probability in [0, 1] (off, a, or a1,a2,... by child rank)");
    ranks.push_back(a);
  }
  SD_CHECK(!ranks.empty() && ranks.size() == size_t(std::count(text.begin(), text.end(), ',')) + 1,
           "speculative: synthetic_acceptance = '", text, "' has an empty entry");
  return ranks;
}

Verdict synthetic_verdict(const DraftProposal& d, const std::vector<Tokens>& best, const std::vector<double>& ranks,
                          Rng& rng) {
  SD_CHECK(!ranks.empty(), "synthetic_verdict: no acceptance probability");
  Verdict v;
  int32_t node = -1;  // the last accepted node (-1: the root, the last committed token)
  for (bool accepted = true; accepted;) {
    accepted = false;
    size_t rank = 0;  // the children tried so far at this node
    for (int32_t c = node + 1; c < d.size(); ++c) {  // a node's children come after it
      if ((d.parents.empty() ? c - 1 : d.parents[c]) != node) continue;
      if (rng.uniform() < ranks[std::min(rank++, ranks.size() - 1)]) {
        v.path.push_back(c);
        v.emitted.push_back(d.tokens[c]);
        node = c;
        accepted = true;
        break;
      }
    }
  }
  v.emitted.push_back(best.at(node + 1).at(0));
  return v;
}

// Counts one verification round into the statistics (per position = per depth for trees).
void count_round(Stats& st, const DraftProposal& d, const Verdict& v) {
  ++st.n_target_forwards;
  ++st.n_rounds;
  st.n_tree_rounds += d.is_chain() ? 0 : 1;
  st.n_draft_forwards += d.n_forwards;
  st.n_drafted += d.size();
  st.n_accepted += v.n_accepted();
  if (v.mode) ++st.verify_mode_rounds[kernels::mode_name(*v.mode)];
  const int64_t depth = std::min<int64_t>(max_depth(d), static_cast<int64_t>(st.drafted_per_position.size()));
  for (int64_t i = 0; i < depth; ++i) ++st.drafted_per_position[i];
  for (int64_t i = 0; i < v.n_accepted() && i < depth; ++i) ++st.accepted_per_position[i];
}

namespace {

Result Speculative::generate(const Request& req, const TokenCallback& on_token) {
  Stopwatch clock;
  Stats st;
  PhaseClock phase(st.phase_ms);  // every interval of this call is charged to one phase
  check_request(req);
  st.n_prompt = static_cast<int64_t>(req.prompt.size());
  StopTracker tracker(req.stop, req.tokenizer.get(), &on_token);
  if (tracker.done()) {
    phase.charge(&PhaseTimes::setup);
    return make_result(tracker, st, clock);
  }
  Rng rng(req.seed);  // the verifier's uniforms, and nothing else
  Rng drafter_rng(drafter_seed(req.seed));  // the drafter's own stream, independent of rng
  Rng synthetic_rng(req.seed ^ 0x5f3759dfull);  // its own stream: rng's draws stay as without it
  st.synthetic_acceptance = cfg_.synthetic;
  const std::shared_ptr<kernels::Backend> backend = req.backend ? req.backend : model::backend_of(req.target->device());
  const int64_t capacity = cache_capacity(req, std::max(cfg_.gamma_max, k_max_draft_nodes) + 1);
  VerifySetup verify = cfg_.verify;
  verify.drafter = resolve_drafter_name(params_, req.draft != nullptr);
  std::unique_ptr<Drafter> drafter =
      make_drafter(verify.drafter, DrafterContext{req, params_, verify.proc, drafter_rng, capacity, cfg_.gamma_max});
  // Structured output: this sequence's matcher (the drafter's rows stay unmasked: a draft token
  // the grammar refuses has target probability 0 and is rejected).
  const std::shared_ptr<sampling::ConstraintState> grammar =
      constraint_ ? constraint_->start(req.tokenizer.get(), req.prompt, req.stop.eos_ids) : nullptr;
  GammaController ctl(cfg_.adaptive, cfg_.gamma, cfg_.gamma_max);
  st.accepted_per_position.assign(cfg_.gamma_max, 0);
  st.drafted_per_position.assign(cfg_.gamma_max, 0);
  // Invariant: both caches hold seq[0 .. n-1); the last committed token is fed next round.
  model::KVCache cache = req.target->make_cache(1, capacity);
  Tokens seq = req.prompt;
  phase.charge(&PhaseTimes::setup);
  const Tokens head(seq.begin(), seq.end() - 1);
  model::ForwardOptions with_features;  // trained drafters read the target's features
  with_features.final_hidden = drafter->wants_target_features();
  if (!head.empty()) {
    const model::ForwardResult r = forward_rows(*req.target, cache, head.data(), st.n_prompt - 1, 0, with_features);
    if (r.hidden.defined()) drafter->observe_features(head, {}, r.hidden);
  }
  drafter->prefill(head);
  ++st.n_target_forwards;
  phase.charge(&PhaseTimes::prefill);

  while (!tracker.timed_out()) {
    const int64_t n = static_cast<int64_t>(seq.size());
    // Never draft past max_new_tokens: the last allowed token comes from the target anyway.
    const int64_t gamma = std::min(ctl.next(), req.stop.max_new_tokens - tracker.n_tokens() - 1);
    phase.charge(&PhaseTimes::other);
    // 1. draft (the drafter splits its own time: forwards, sampling q, copies)
    DraftProposal d = drafter->propose(seq, gamma);
    const double ms_draft = phase.charge_parts(d.ms, &PhaseTimes::draft);
    // 2. score: the target sees [last, draft...] in one forward -> a next-token row for the
    //    last committed token and for every draft node (a tree: each node sees its own path)
    model::ForwardOptions opt = d.is_chain() ? model::ForwardOptions{} : tree_forward_options(d, req.target->device());
    opt.final_hidden = with_features.final_hidden;
    phase.charge(&PhaseTimes::other);
    const model::ForwardResult scored =
        forward_rows(*req.target, cache, fed_tokens(seq.back(), d, req.target->device()), n - 1, opt);
    const at::Tensor& logits = scored.logits;  // [k+1, V], k = d.size()
    const double ms_verify = phase.charge(&PhaseTimes::verify);
    // 3. verify, each row processed after the committed text + its own root-to-node path; with
    //    structured output each row is first masked after that same path (the draft read here)
    if (grammar) {
      d.read_drawn(/*synced=*/false);
      grammar->mask(logits, seq, d.tokens, d.parents);
    }
    const at::Tensor p = target_probabilities(logits, verify.proc, seq, d);  // [k+1, V]
    const int64_t top = drafter->target_topk();  // the target's top tokens ride with the verdict
    const at::Tensor top_ids = top > 0 ? top_token_ids(logits, top) : at::Tensor();
    const at::Tensor best = !cfg_.synthetic.empty() ? top_token_ids(p, 1) : at::Tensor();  // likewise
    Verdict v = verify_round(*backend, verify, {&d}, {p}, {&rng})[0];
    d.read_drawn(/*synced=*/true);  // the verdict's read brought them
    if (!cfg_.synthetic.empty()) v = synthetic_verdict(d, token_rows(best), cfg_.synthetic, synthetic_rng);
    phase.charge(&PhaseTimes::sample);
    Tokens fed = {seq.back()};
    fed.insert(fed.end(), d.tokens.begin(), d.tokens.end());
    const std::vector<int32_t> parents =  // on the host now: the verdict brought an unread tree in
        d.is_chain() ? std::vector<int32_t>{} : tree_forward_options(d, at::kCPU).parents;
    if (top > 0) drafter->observe(fed, parents, token_rows(top_ids));
    if (scored.hidden.defined()) drafter->observe_features(fed, parents, scored.hidden);
    phase.charge(&PhaseTimes::draft);
    // 4. accept: token by token, so EOS / stop strings inside the block cut it exactly
    for (TokenId t : v.emitted) {
      seq.push_back(t);
      if (tracker.push(t)) break;
    }
    if (st.ms_first_token == 0) st.ms_first_token = clock.ms();
    tracker.flush();
    phase.charge(&PhaseTimes::accept);
    // 5. roll back both caches to the committed prefix (all but the newest token); a tree's
    //    accepted nodes first move next to the root (node i was fed at slot n + i)
    if (!d.is_chain() && !v.path.empty()) {
      std::vector<int64_t> keep;
      for (int32_t node : v.path) keep.push_back(n + node);
      cache.compact(0, n, keep);
    }
    cache.truncate(0, std::min(cache.length(0), static_cast<int64_t>(seq.size()) - 1));
    drafter->commit(static_cast<int64_t>(seq.size()) - 1, v.path);
    phase.charge(&PhaseTimes::rollback);
    count_round(st, d, v);
    if (req.trace) req.trace->round(d, p, v.path, Tokens(seq.begin() + n, seq.end()), st.phase_ms);
    ctl.update(max_depth(d), v.n_accepted(), ms_draft, ms_verify);
    if (tracker.done()) break;
  }
  phase.charge(&PhaseTimes::other);
  tracker.flush();
  drafter->report(st.drafter_stats);
  phase.charge(&PhaseTimes::accept);
  return make_result(tracker, st, clock);
}

// `drafter` choices for the help text: auto and the registered drafters.
std::string drafter_help() {
  std::string names = "auto";
  for (const auto& d : all_drafters()) names += " | " + d.name;
  return names + " (auto: model when a draft model is given, else ngram)";
}

StrategyNeeds speculative_needs(const Params& resolved, bool have_draft_model) {
  StrategyNeeds needs;
  needs.drafter = resolve_drafter_name(resolved, have_draft_model);
  needs.draft_model = find_drafter(needs.drafter).needs_draft_model;
  needs.draft_length = resolved.get_int("gamma");
  return needs;
}

}  // namespace

// The strategy's own parameters, then every drafter's (drafter_params()), so `--set
// ngram_max=5` is validated and defaulted like any other speculative parameter.
StrategyInfo speculative_info() {
  StrategyInfo info;
  info.name = "speculative";
  info.description = "speculative decoding: a drafter (draft model, n-gram or suffix lookup, ...) proposes "
                     "up to gamma tokens, the target verifies";
  info.params = {
      {"gamma", "int", "4", "draft tokens per round (start value when adaptive)"},
      {"gamma_max", "int", "8", "upper bound for adaptive gamma"},
      {"drafter", "string", "auto", drafter_help()},
      {"adaptive_gamma", "string", "off",
       "off | hf (+2 on full accept, -1 otherwise) | cost (from measured draft/verify times: NOT "
       "reproducible, with temperature > 0 the tokens for a seed depend on timings)"},
      {"verify", "string", "tokenwise",
       "tokenwise | block (block verification of chains with a draft distribution, Sun et al. 2025)"},
      {"synthetic_acceptance", "string", "off",
       "off | a probability | a1,a2,... by child rank: BENCHMARKING THE LOOP ONLY, each draft node is "
       "accepted at random instead of verified (chains position by position with a1; trees child by child, "
       "the i-th child tried at a node with ai, the last value for all later ones); the tokens are NOT the "
       "target's, and every output carries synthetic_acceptance"},
  };
  for (const auto& p : drafter_params()) {
    for (const auto& own : info.params)
      SD_CHECK(own.name != p.name, "drafter parameter '", p.name, "' clashes with a speculative parameter");
    info.params.push_back(p);
  }
  info.factory = [](const Params& p) { return std::make_unique<Speculative>(p); };
  info.needs = speculative_needs;
  return info;
}

}  // namespace specdec::strategies
