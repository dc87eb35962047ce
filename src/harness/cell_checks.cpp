// The runs of the distribution checks (checks.h) of a sampled cell: candidate and baseline
// samples from the first prompt, the target's exact first-token distribution and the samples'
// log-likelihoods (cell_runner.h).
//
// Under a structured-output constraint (the cell's, or the first prompt's own) the law the
// candidate must follow is the constrained target's: the grammar's mask on the raw row first,
// then the processors (sampling/grammar.h). The first-token reference is that masked row; the
// sequence test's reference is the autoregressive baseline, which decodes under the same
// constraint (plan.cpp gives it the cell's; a prompt's own reaches every request on it). Its
// log-likelihood statistic stays the raw target's: any fixed function of a sequence serves a
// two-sample test, whatever law the two samples share.
#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "harness/cell_runner.h"
#include "harness/checks.h"
#include "model/device.h"
#include "model/prefix_reuse.h"
#include "sampling/grammar.h"
#include "strategies/common.h"

namespace specdec::harness {

namespace reg = specdec::strategies;
using nlohmann::json;

std::vector<double> CellRunner::first_token_probs(model::CausalLM& target, const Tokens& prompt,
                                                  const sampling::ProcessorConfig& proc,
                                                  sampling::ConstraintState* grammar) {
  model::KVCache cache = target.make_cache(1, static_cast<int64_t>(prompt.size()) + 1);
  const at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong).view({1, -1});
  const at::Tensor logits = target.forward(ids, {0}, cache);  // [1, T, V]
  const at::Tensor last = logits[0].narrow(0, logits.size(1) - 1, 1).contiguous();  // [1, V]
  // The mask before the processors, as the strategies apply it (sampling.cpp, speculative/loop.cpp).
  if (grammar) grammar->mask(last, prompt);
  const at::Tensor p = model::on_host(sampling::probabilities(last, proc, prompt)).to(at::kDouble).contiguous();  // [1, V]
  const double* d = p.data_ptr<double>();
  return std::vector<double>(d, d + p.numel());
}

// Raw (unprocessed) target log-likelihoods. Every row of the packed engine's forward is computed
// alone, so a batched value equals the one-at-a-time value bit for bit.
std::vector<double> CellRunner::logliks(model::CausalLM& target, const Tokens& prompt, const std::vector<Tokens>& gens,
                                        int64_t length, int64_t batch) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  std::vector<double> out;
  for (size_t i0 = 0; i0 < gens.size(); i0 += static_cast<size_t>(batch)) {
    check_interrupt();
    const int64_t B = std::min<int64_t>(batch, static_cast<int64_t>(gens.size() - i0));
    std::vector<int64_t> n(B);
    int64_t T = P;
    for (int64_t b = 0; b < B; ++b) {
      n[b] = std::min<int64_t>(length, static_cast<int64_t>(gens[i0 + b].size()));
      T = std::max(T, P + n[b]);
    }
    if (B == 1 && n[0] == 0) {
      out.push_back(0);
      continue;
    }
    at::Tensor ids = at::zeros({B, T}, at::kLong);  // [B, T]: prompt + generation, ragged
    model::ForwardOptions opt;
    for (int64_t b = 0; b < B; ++b) {
      int64_t* row = ids.data_ptr<int64_t>() + b * T;
      std::copy(prompt.begin(), prompt.end(), row);
      std::copy(gens[i0 + b].begin(), gens[i0 + b].begin() + n[b], row + P);
      if (B > 1) opt.n_fed.push_back(P + n[b]);
    }
    model::KVCache cache = target.make_cache(B, T);
    const at::Tensor logits = target.forward(ids, std::vector<int64_t>(B, 0), cache, opt).logits;  // [B, T, V]
    for (int64_t b = 0; b < B; ++b) {
      if (n[b] == 0) {
        out.push_back(0);
        continue;
      }
      const at::Tensor lp = at::log_softmax(logits[b].narrow(0, P - 1, n[b]).to(at::kDouble), -1);  // [n, V]
      const Tokens& g = gens[i0 + b];
      const at::Tensor tgt = at::tensor(std::vector<int64_t>(g.begin(), g.begin() + n[b]), at::kLong).view({-1, 1});
      out.push_back(lp.gather(1, tgt).sum().item<double>());
    }
  }
  return out;
}

void CellRunner::sampling_checks(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples) {
  const auto& k = cfg_.checks;
  if (!k.first_token && !k.sequence) return;
  const auto& p = prompts_[0];
  const int64_t len = std::max<int64_t>(2, k.sequence_length);  // >= 2 so the first token is drafted
  auto cand = reg::create(pc.cell.strategy, pc.resolved);
  auto base = reg::create("sampling", pc.baseline_params);
  // Every check run starts from this prompt, so its prefill is computed once per model and
  // copied (model/prefix_reuse.h): the same logits, a fraction of the time. (Only the checks:
  // the measured generations pay their prefill.)
  const std::vector<int64_t> prefix(p.tokens.begin(), p.tokens.end());
  auto target = std::make_shared<model::PrefixReuse>(models_.target.model, prefix);
  std::shared_ptr<model::CausalLM> draft;
  if (models_.draft)
    draft = models_.draft->model == models_.target.model
                ? target
                : std::make_shared<model::PrefixReuse>(models_.draft->model, prefix);
  auto check_req = [&](uint64_t seed, bool candidate) {
    reg::Request r = request(*p.item, p.tokens, seed, len, candidate);
    r.target = target;
    if (draft) r.draft = draft;
    return r;
  };
  // The constraint the candidate decodes under on this prompt (null: none). The sequence test's
  // reference is the baseline's samples: under another constraint they would follow another law.
  // (The plan hands the cell's parse to its baseline, so the same constraint is the same object.)
  const auto constraint = reg::constraint_for(check_req(0, true), pc.resolved.constraint());
  const auto base_constraint = reg::constraint_for(check_req(0, false), pc.baseline_params.constraint());
  SD_CHECK(!k.sequence || constraint == base_constraint, "sequence check of ", pc.cell.key,
           ": the candidate decodes under ", constraint ? constraint->key() : "no constraint", " but its baseline under ",
           base_constraint ? base_constraint->key() : "no constraint", "; the test needs both under the same one");
  const std::string where = "prompt " + p.item->id + (constraint ? " under " + constraint->key() : "") + "; ";
  // The samples are drawn in batches (checks.batch_size) where the target takes ragged batches;
  // each sample's tokens are its batch-1 generation's either way (strategy.h: generate_batch).
  const int64_t batch = target->ragged_batches() ? k.batch_size : 1;
  const int64_t n_cand = std::max(k.first_token ? k.first_token_samples : 0, k.sequence ? k.sequence_samples : 0);
  std::vector<Tokens> cand_seqs, base_seqs;
  std::vector<TokenId> first;
  std::vector<reg::Request> reqs;
  for (int64_t j = 0; j < n_cand; ++j) reqs.push_back(check_req(cfg_.seed + 1000003 + static_cast<uint64_t>(j), true));
  const std::vector<Timed> cand_runs = generate_many(*cand, reqs, batch, "check sample",
                                                     static_cast<size_t>(4 * batch));
  for (size_t j = 0; j < cand_runs.size(); ++j) {
    const Timed& t = cand_runs[j];
    SD_CHECK(!t.result.tokens.empty(), "check run of ", pc.cell.key, " generated no token");
    first.push_back(t.result.tokens[0]);
    cand_seqs.push_back(t.result.tokens);
    samples.push_back(sample_line(pc.cell.key, "check_candidate", p, 0, reqs[j].seed, t));
  }
  if (k.first_token) {
    // A matcher of the candidate's constraint after this prompt, started as its strategy starts
    // one (null: none), so that the reference has the mask its samples were drawn under.
    const auto grammar = reg::start_constraint(check_req(0, true), pc.resolved.constraint());
    const auto probs = first_token_probs(*target, p.tokens, reg::processor_config(pc.resolved), grammar.get());
    std::vector<TokenId> ft(first.begin(), first.begin() + k.first_token_samples);
    auto out = first_token_check(probs, ft, k.first_token_top_k, k.significance);
    out.detail = where + out.detail;
    m.checks.push_back(out);
  }
  if (!k.sequence) return;
  reqs.clear();
  for (int64_t j = 0; j < k.sequence_samples; ++j)  // seeds independent of the candidate's
    reqs.push_back(check_req(cfg_.seed + 2000003 + static_cast<uint64_t>(j), false));
  const std::vector<Timed> base_runs = generate_many(*base, reqs, batch, "check baseline", static_cast<size_t>(4 * batch));
  for (int64_t j = 0; j < k.sequence_samples; ++j) {
    const Timed& t = base_runs[static_cast<size_t>(j)];
    base_seqs.push_back(t.result.tokens);
    samples.push_back(sample_line(pc.cell.key, "check_baseline", p, 0, reqs[static_cast<size_t>(j)].seed, t));
  }
  cand_seqs.resize(static_cast<size_t>(k.sequence_samples));
  const std::vector<double> ll_base = logliks(*target, p.tokens, base_seqs, len, batch);
  const std::vector<double> ll_cand = logliks(*target, p.tokens, cand_seqs, len, batch);
  auto out = sequence_check(base_seqs, cand_seqs, ll_base, ll_cand, len, k.significance);
  out.detail = where + out.detail;
  m.checks.push_back(out);
}

}  // namespace specdec::harness
