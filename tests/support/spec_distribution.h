#pragma once
// Monte-Carlo checks that a speculative strategy leaves the processed target distribution
// unchanged: the exact joint law of the first three generated tokens (a tiny model's, or a real
// model's under top-p: exact_joint_shared), a chi-square goodness-of-fit p-value (Boost.Math) of
// sampled triples against it, the total variation, and the test's power (noncentral chi-square).
#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/non_central_chi_squared.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "sampling/processors.h"
#include "strategies/common.h"
#include "strategies/strategy.h"

namespace specdec::test_support {

using Triple = std::array<TokenId, 3>;
using Dist = std::map<Triple, double>;

// Processed next-token distribution after `seq` with a fresh cache. returns [V]
inline at::Tensor next_probs(model::CausalLM& m, const Tokens& seq, const sampling::ProcessorConfig& proc) {
  model::KVCache cache = m.make_cache(1, static_cast<int64_t>(seq.size()) + 1);
  at::Tensor logits = strategies::forward_tokens(m, cache, seq.data(), static_cast<int64_t>(seq.size()), 0);
  return sampling::probabilities(logits.narrow(0, logits.size(0) - 1, 1), proc, seq).squeeze(0);
}

// P(x1, x2, x3 | prompt) under the processed target.
inline Dist exact_joint(model::CausalLM& m, const Tokens& prompt, const sampling::ProcessorConfig& proc) {
  Dist d;
  const at::Tensor p1 = next_probs(m, prompt, proc);
  for (TokenId a = 0; a < p1.size(0); ++a) {
    const double pa = p1[a].item<double>();
    if (pa <= 0) continue;
    Tokens s1 = prompt;
    s1.push_back(a);
    const at::Tensor p2 = next_probs(m, s1, proc);
    for (TokenId b = 0; b < p2.size(0); ++b) {
      const double pb = p2[b].item<double>();
      if (pb <= 0) continue;
      Tokens s2 = s1;
      s2.push_back(b);
      const at::Tensor p3 = next_probs(m, s2, proc);
      for (TokenId c = 0; c < p3.size(0); ++c)
        if (p3[c].item<double>() > 0) d[{a, b, c}] = pa * pb * p3[c].item<double>();
    }
  }
  return d;
}

// The non-zero entries (token, probability) of a probability row, likeliest first. probs: [V]
inline std::vector<std::pair<TokenId, double>> support_of(const at::Tensor& probs) {
  const at::Tensor row = probs.to(at::kCPU, at::kDouble).contiguous();
  const double* p = row.data_ptr<double>();
  std::vector<std::pair<TokenId, double>> out;
  for (int64_t v = 0; v < row.numel(); ++v)
    if (p[v] > 0) out.emplace_back(static_cast<TokenId>(v), p[v]);
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  return out;
}

// exact_joint for a real model (vocabulary ~50k-150k, where one fresh forward per prefix costs
// minutes): one KV cache with the prompt prefilled once; each first token x1 is fed on top of
// it, and all its second tokens x2 together as siblings of one tree (parents -1), so the whole
// law takes 1 + 2 |support(x1)| forwards. Top-p keeps the support small.
inline Dist exact_joint_shared(model::CausalLM& m, const Tokens& prompt, const sampling::ProcessorConfig& proc) {
  constexpr int64_t k_max_siblings = 2048;  // cache room for one x1's support of x2
  const int64_t P = static_cast<int64_t>(prompt.size());
  model::KVCache cache = m.make_cache(1, P + 1 + k_max_siblings);
  const at::Tensor prompt_logits = strategies::forward_tokens(m, cache, prompt.data(), P, 0);  // [P, V]
  const at::Tensor p1 = sampling::probabilities(prompt_logits.narrow(0, P - 1, 1), proc, prompt).squeeze(0);
  Dist d;
  for (const auto& [a, pa] : support_of(p1)) {
    cache.truncate(0, P);
    Tokens s1 = prompt;
    s1.push_back(a);
    const at::Tensor row_a = strategies::forward_tokens(m, cache, &a, 1, P);  // [1, V]
    const auto sup2 = support_of(sampling::probabilities(row_a, proc, s1).squeeze(0));
    const int64_t n2 = static_cast<int64_t>(sup2.size());
    if (n2 > k_max_siblings) throw std::runtime_error("exact_joint_shared: support of x2 too large for the cache");
    Tokens bs;
    for (const auto& [b, pb] : sup2) bs.push_back(b);
    model::ForwardOptions siblings;
    siblings.parents.assign(static_cast<size_t>(n2), -1);  // each b follows prompt + a directly
    const at::Tensor rows_b = strategies::forward_tokens(m, cache, bs.data(), n2, P + 1, siblings);  // [n2, V]
    // Row 0 follows s1, row j + 1 follows s1 + bs[j] (the processors see each path).
    const at::Tensor p3 = sampling::probabilities(at::cat({row_a, rows_b}), proc, s1, bs, siblings.parents);
    for (int64_t j = 0; j < n2; ++j)
      for (const auto& [c, pc] : support_of(p3[j + 1]))
        d[{a, bs[static_cast<size_t>(j)], c}] = pa * sup2[static_cast<size_t>(j)].second * pc;
  }
  return d;
}

// The cells of chi_square_p at n samples: outcomes expected >= 5 times, each its own cell, then
// (when not empty) the pool of the rest. Returns the cell of each outcome and the cell count.
inline std::pair<std::map<Triple, int64_t>, int64_t> chi_square_cells(const Dist& exact, int64_t n) {
  std::map<Triple, int64_t> cell;
  int64_t n_cells = 0;
  bool pooled = false;
  for (const auto& [t, p] : exact)
    if (p * double(n) >= 5) cell[t] = n_cells++;
  for (const auto& [t, p] : exact)
    if (!cell.count(t)) cell[t] = n_cells, pooled = true;
  return {cell, n_cells + (pooled ? 1 : 0)};
}

// Power of chi_square_p at level `alpha` with n samples when the samples follow `truth`
// instead of `exact` (both over exact's outcomes): the noncentral chi-square approximation,
// noncentrality n * sum over cells of (truth - exact)^2 / exact.
inline double chi_square_power(const Dist& exact, const Dist& truth, int64_t n, double alpha) {
  const auto [cell, n_cells] = chi_square_cells(exact, n);
  std::vector<double> e(static_cast<size_t>(n_cells), 0.0), t(static_cast<size_t>(n_cells), 0.0);
  for (const auto& [x, p] : exact) e[static_cast<size_t>(cell.at(x))] += p;
  for (const auto& [x, p] : truth) t[static_cast<size_t>(cell.at(x))] += p;
  double lambda = 0;
  for (size_t i = 0; i < e.size(); ++i) lambda += (t[i] - e[i]) * (t[i] - e[i]) / e[i];
  lambda *= double(n);
  const double df = double(n_cells - 1);
  const double crit = boost::math::quantile(boost::math::complement(boost::math::chi_squared(df), alpha));
  return boost::math::cdf(boost::math::complement(boost::math::non_central_chi_squared(df, lambda), crit));
}

// The least power over every law at total variation `tv` from `exact` on chi_square_p's cells:
// sum (t - e)^2 / e >= (sum |t - e|)^2 = (2 tv)^2 (Cauchy-Schwarz, sum e = 1), with equality
// when mass tv moves proportionally from cells holding half the mass to the other half.
inline double chi_square_min_power(const Dist& exact, int64_t n, double tv, double alpha) {
  const double df = double(chi_square_cells(exact, n).second - 1);
  const double crit = boost::math::quantile(boost::math::complement(boost::math::chi_squared(df), alpha));
  const double lambda = double(n) * 4 * tv * tv;
  return boost::math::cdf(boost::math::complement(boost::math::non_central_chi_squared(df, lambda), crit));
}

// The least power (chi_square_power) over a family of laws at total variation `tv`: mass tv
// moved from one outcome to another, or from one outcome spread over the rest in proportion.
inline double chi_square_family_min_power(const Dist& exact, int64_t n, double tv, double alpha) {
  double least = 1;
  for (const auto& [from, p_from] : exact) {
    if (p_from < tv) continue;
    Dist spread = exact;
    spread[from] -= tv;
    for (auto& [t, p] : spread)
      if (t != from) p += tv * exact.at(t) / (1 - p_from);
    least = std::min(least, chi_square_power(exact, spread, n, alpha));
    for (const auto& [to, p_to] : exact) {
      if (to == from) continue;
      Dist moved = exact;
      moved[from] -= tv;
      moved[to] += tv;
      least = std::min(least, chi_square_power(exact, moved, n, alpha));
    }
  }
  return least;
}

// The smallest n (a multiple of `step`) at which chi_square_min_power reaches `power`; the
// cells (and so the degrees of freedom) depend on n, hence the search.
inline int64_t samples_for_power(const Dist& exact, double tv, double alpha, double power, int64_t step = 50) {
  int64_t n = step;
  while (chi_square_min_power(exact, n, tv, alpha) < power) n += step;
  return n;
}

// Total variation between the empirical law of n samples and `exact` (samples outside the
// support count in full).
inline double total_variation(const Dist& exact, const std::map<Triple, int64_t>& counts, int64_t n) {
  double sum = 0, seen = 0;
  for (const auto& [t, p] : exact) {
    auto it = counts.find(t);
    const double f = it == counts.end() ? 0.0 : double(it->second) / double(n);
    sum += std::fabs(f - p);
    seen += f;
  }
  return 0.5 * (sum + (1.0 - seen));
}

// Chi-square goodness of fit; outcomes expected < 5 times are pooled into one cell, and
// samples outside the support count in that cell too (a sample the target can never produce
// with no pooled mass gives p = 0).
inline double chi_square_p(const Dist& exact, const std::map<Triple, int64_t>& counts, int64_t n) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int64_t n_cells = 0, n_seen = 0;
  for (const auto& [t, p] : exact) {
    const double e = p * double(n);
    auto it = counts.find(t);
    const double o = it == counts.end() ? 0.0 : double(it->second);
    n_seen += int64_t(o);
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++n_cells;
  }
  pooled_o += double(n - n_seen);
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++n_cells;
  } else if (pooled_o > 0) {
    return 0.0;
  }
  const double p = boost::math::cdf(boost::math::complement(boost::math::chi_squared(double(n_cells - 1)), stat));
  std::printf("  chi2 = %.1f, df = %lld, p = %.3g\n", stat, static_cast<long long>(n_cells - 1), p);
  return p;
}

// n samples of the first three generated tokens: copies of `base` with seeds 0..n-1 (and
// max_new_tokens 3), decoded `batch` at a time by generate_batch, which gives each request its
// batch-1 tokens. Also sums the statistics the checks report.
struct Samples {
  std::map<Triple, int64_t> counts;
  int64_t n = 0, n_drafted = 0, n_accepted = 0, n_rounds = 0, n_tree_rounds = 0;
  std::map<std::string, int64_t> verify_mode_rounds;
  double alpha() const { return n_drafted ? double(n_accepted) / double(n_drafted) : 0.0; }
};

inline Samples sample_triples(strategies::Strategy& s, const strategies::Request& base, int64_t n, int64_t batch) {
  std::vector<strategies::Request> reqs(static_cast<size_t>(n), base);
  for (int64_t i = 0; i < n; ++i) {
    reqs[static_cast<size_t>(i)].seed = static_cast<uint64_t>(i);
    reqs[static_cast<size_t>(i)].stop.max_new_tokens = 3;
  }
  strategies::BatchOptions opt;
  opt.batch_size = batch;
  Samples out;
  out.n = n;
  for (const strategies::Result& r : s.generate_batch(reqs, opt, {})) {
    if (r.tokens.size() != 3) throw std::runtime_error("sample_triples: a sample ended before 3 tokens");
    ++out.counts[{r.tokens[0], r.tokens[1], r.tokens[2]}];
    out.n_drafted += r.stats.n_drafted;
    out.n_accepted += r.stats.n_accepted;
    out.n_rounds += r.stats.n_rounds;
    out.n_tree_rounds += r.stats.n_tree_rounds;
    for (const auto& [mode, rounds] : r.stats.verify_mode_rounds) out.verify_mode_rounds[mode] += rounds;
  }
  return out;
}

// Registry parameters of the verification paths the law checks cover, on top of `processors`
// (temperature, top_p, ...): "chain" (model drafter, tokenwise), "block" (model drafter, block
// verification), "tree" (static 2,2,1 tree sampled from q: multi-draft verification).
inline strategies::Params speculative_path_params(const std::string& path, std::map<std::string, std::string> p) {
  p["drafter"] = "model";
  p["gamma"] = "3";
  if (path == "block") p["verify"] = "block";
  if (path == "tree") p["drafter"] = "tree", p["tree_branching"] = "2,2,1", p["tree_budget"] = "0";
  return strategies::Params(p);
}

// Prints the samples' acceptance and total variation from `exact`; returns chi_square_p.
inline double report_law(const std::string& what, const Dist& exact, const Samples& s) {
  std::printf("%s: N = %lld, alpha = %.3f (%lld of %lld drafted), accepted per round %.2f, TV = %.4f\n", what.c_str(),
              static_cast<long long>(s.n), s.alpha(), static_cast<long long>(s.n_accepted),
              static_cast<long long>(s.n_drafted), double(s.n_accepted) / double(std::max<int64_t>(1, s.n_rounds)),
              total_variation(exact, s.counts, s.n));
  return chi_square_p(exact, s.counts, s.n);
}

// A planted bug for the checks to catch, in test code: after a rejection the correction token
// is sampled from p at that position (with the final-sample uniform) instead of the residual
// norm(max(0, p - q)), in chain (sampling, block) and tree verification alike; accepted and
// bonus tokens stay the real backend's. harness/planted_bug.h is the harness's chain-only twin.
class ResidualAsPBackend final : public kernels::Backend {
 public:
  explicit ResidualAsPBackend(std::shared_ptr<kernels::Backend> real) : real_(std::move(real)) {}
  kernels::Device device() const override { return real_->device(); }

  void verify(const kernels::VerifyArgs& a) override {
    real_->verify(a);
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t n_draft = a.n_draft ? a.n_draft[b] : a.gamma, acc = a.n_accepted[b];
      if (acc >= n_draft) continue;  // no rejection: the bonus token stays
      const int64_t row = b * (a.gamma + 1) + acc;
      a.out_tokens[row] = sample_p_row(a.p + row * a.vocab, a.vocab, a.uniforms[b * (a.gamma + 1) + a.gamma]);
    }
  }

  void verify_tree(const kernels::TreeVerifyArgs& a) override {
    real_->verify_tree(a);
    const int64_t N = a.max_nodes;
    for (int64_t b = 0; b < a.batch; ++b) {
      const int32_t acc = a.n_accepted[b];
      const int32_t node = acc > 0 ? a.path[b * N + acc - 1] : -1;  // the last accepted node (-1: root)
      bool has_child = false;  // children all rejected: the final token came from the residual
      for (int32_t j = 0; j < a.n_nodes[b]; ++j) has_child |= a.parents[b * N + j] == node;
      if (!has_child) continue;
      const float* p_row = a.p + (b * (N + 1) + node + 1) * a.vocab;  // p row 0: root, i + 1: node i
      a.out_tokens[b * (N + 1) + acc] = sample_p_row(p_row, a.vocab, a.uniforms[b * (N + 1) + N]);
    }
  }

  void kv_compact(const kernels::CompactArgs& a) override { real_->kv_compact(a); }
  void kv_reorder(float* dst, const float* src, const int64_t* idx, int64_t batch, int64_t row_elems) override {
    real_->kv_reorder(dst, src, idx, batch, row_elems);
  }
  void pick(const kernels::PickArgs& a) override { real_->pick(a); }
  void to_host(void* dst, const void* src, size_t bytes) override { real_->to_host(dst, src, bytes); }

 private:
  // p rows live in the backend's memory: read through a host copy.
  int32_t sample_p_row(const float* p_row, int64_t vocab, double u) {
    std::vector<float> host(static_cast<size_t>(vocab));
    real_->to_host(host.data(), p_row, sizeof(float) * host.size());
    return sampling::sample_from(host.data(), vocab, u);
  }
  std::shared_ptr<kernels::Backend> real_;
};

}  // namespace specdec::test_support
