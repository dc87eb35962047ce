#include "harness/checks.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <numeric>

#include "core/error.h"
#include "harness/stats.h"

namespace specdec::harness {

using nlohmann::json;

namespace {
std::string fmt_p(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", p);
  return buf;
}
}  // namespace

CheckOutcome greedy_equality_check(const std::vector<std::string>& prompt_ids, const std::vector<Tokens>& baseline,
                                   const std::vector<Tokens>& candidate) {
  SD_CHECK(baseline.size() == candidate.size() && baseline.size() == prompt_ids.size(),
           "greedy_equality_check: ", prompt_ids.size(), " prompts, ", baseline.size(), " baseline and ",
           candidate.size(), " candidate outputs");
  CheckOutcome out;
  out.name = "greedy_equality";
  out.n_samples = static_cast<int64_t>(baseline.size());
  int64_t n_equal = 0;
  std::string mismatches;
  for (size_t i = 0; i < baseline.size(); ++i) {
    const auto& a = baseline[i];
    const auto& b = candidate[i];
    if (a == b) {
      ++n_equal;
      continue;
    }
    size_t pos = 0;
    while (pos < a.size() && pos < b.size() && a[pos] == b[pos]) ++pos;
    const std::string ta = pos < a.size() ? std::to_string(a[pos]) : "end";
    const std::string tb = pos < b.size() ? std::to_string(b[pos]) : "end";
    mismatches += "; prompt " + prompt_ids[i] + " differs at position " + std::to_string(pos) + " (baseline " + ta +
                  ", candidate " + tb + ")";
  }
  out.pass = n_equal == out.n_samples;
  char buf[96];
  std::snprintf(buf, sizeof buf, "exact-match rate %.1f%% (%lld/%lld)",
                out.n_samples ? 100.0 * n_equal / out.n_samples : 100.0, static_cast<long long>(n_equal),
                static_cast<long long>(out.n_samples));
  out.detail = buf + mismatches;
  return out;
}

CheckOutcome first_token_check(const std::vector<double>& p, const std::vector<TokenId>& first_tokens, int64_t top_k,
                               double significance) {
  SD_CHECK(!p.empty() && !first_tokens.empty(), "first_token_check: empty distribution or no samples");
  const double n = static_cast<double>(first_tokens.size());
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min<size_t>(static_cast<size_t>(top_k), p.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  // Bins: each of the top-k tokens whose expected count N p is at least kMinExpected, then
  // "other" for everything else. Pearson's chi-square is only chi-square distributed when
  // no expected count is small: one draw of a token with N p = 0.01 alone adds ~100 to the
  // statistic. "Other" itself must meet the same bound, or it joins the last token bin.
  constexpr double kMinExpected = 5.0;
  std::map<int64_t, size_t> bin_of;
  std::vector<double> expected;
  double top_mass = 0;
  for (size_t i = 0; i < k && n * p[order[i]] >= kMinExpected; ++i) {
    bin_of[order[i]] = i;
    expected.push_back(p[order[i]]);
    top_mass += p[order[i]];
  }
  const size_t kept = expected.size();
  size_t other = kept;
  if (kept > 0 && n * std::max(0.0, 1.0 - top_mass) < kMinExpected) {
    other = kept - 1;  // merge "other" into the last token bin
    expected[other] += std::max(0.0, 1.0 - top_mass);
    bin_of.erase(order[other]);
  } else {
    expected.push_back(std::max(0.0, 1.0 - top_mass));
  }
  CheckOutcome out;
  out.name = "first_token";
  out.n_samples = static_cast<int64_t>(first_tokens.size());
  out.significance = significance;
  if (expected.size() < 2) {  // one token holds (nearly) all the mass: nothing to test at this N
    out.p_value = 1.0;
    out.pass = true;
    out.detectable_tv = -1;
    out.detail = "not testable: the top token has probability " + fmt_p(p[order[0]]) +
                 ", so no second bin reaches an expected count of 5 with N = " + std::to_string(out.n_samples);
    return out;
  }
  std::vector<int64_t> observed(expected.size(), 0);
  for (TokenId t : first_tokens) {
    const auto it = bin_of.find(t);
    ++observed[it == bin_of.end() ? other : it->second];
  }
  const auto chi = stats::pearson_gof(observed, expected);
  const auto g = stats::g_test_gof(observed, expected);
  out.p_value = std::min(1.0, 2.0 * std::min(chi.p_value, g.p_value));
  out.pass = out.p_value >= significance;
  out.detectable_tv = stats::detectable_tv(out.n_samples, static_cast<int64_t>(expected.size()), significance / 2);
  out.detail = "bins " + std::to_string(expected.size()) + " (" + std::to_string(bin_of.size()) + " of the top " +
               std::to_string(k) + " tokens with N p >= 5, + other, top mass " + fmt_p(top_mass) + "); chi2 " +
               fmt_p(chi.statistic) + " p " + fmt_p(chi.p_value) + "; G " + fmt_p(g.statistic) + " p " +
               fmt_p(g.p_value);
  return out;
}

namespace {
// Token counts at position t; -1 stands for "the sequence already ended".
std::map<TokenId, int64_t> position_counts(const std::vector<Tokens>& seqs, size_t t) {
  std::map<TokenId, int64_t> c;
  for (const auto& s : seqs) ++c[t < s.size() ? s[t] : -1];
  return c;
}

stats::TestResult position_test(const std::vector<Tokens>& a, const std::vector<Tokens>& b, size_t t) {
  const auto ca = position_counts(a, t), cb = position_counts(b, t);
  std::map<TokenId, std::pair<int64_t, int64_t>> both;
  for (const auto& [tok, n] : ca) both[tok].first = n;
  for (const auto& [tok, n] : cb) both[tok].second = n;
  // Pool rare tokens so the chi-square approximation holds (expected counts >= ~5).
  std::vector<int64_t> va, vb;
  int64_t rare_a = 0, rare_b = 0;
  for (const auto& [tok, n] : both) {
    if (n.first + n.second < 10) {
      rare_a += n.first;
      rare_b += n.second;
    } else {
      va.push_back(n.first);
      vb.push_back(n.second);
    }
  }
  va.push_back(rare_a);
  vb.push_back(rare_b);
  return stats::homogeneity(va, vb);
}
}  // namespace

CheckOutcome sequence_check(const std::vector<Tokens>& baseline, const std::vector<Tokens>& candidate,
                            const std::vector<double>& baseline_loglik, const std::vector<double>& candidate_loglik,
                            int64_t length, double significance) {
  SD_CHECK(!baseline.empty() && !candidate.empty(), "sequence_check: no samples");
  CheckOutcome out;
  out.name = "sequence";
  out.n_samples = static_cast<int64_t>(std::min(baseline.size(), candidate.size()));
  out.significance = significance;
  double min_p = 1.0;
  std::string per_pos;
  for (int64_t t = 0; t < length; ++t) {
    const auto r = position_test(baseline, candidate, static_cast<size_t>(t));
    min_p = std::min(min_p, r.p_value);
    per_pos += (t ? " " : "") + fmt_p(r.p_value);
  }
  const auto mw = stats::mann_whitney(baseline_loglik, candidate_loglik);
  min_p = std::min(min_p, mw.p_value);
  const double mean_a = std::accumulate(baseline_loglik.begin(), baseline_loglik.end(), 0.0) /
                        std::max<size_t>(1, baseline_loglik.size());
  const double mean_b = std::accumulate(candidate_loglik.begin(), candidate_loglik.end(), 0.0) /
                        std::max<size_t>(1, candidate_loglik.size());
  out.p_value = std::min(1.0, static_cast<double>(length + 1) * min_p);
  out.pass = out.p_value >= significance;
  out.detail = "L " + std::to_string(length) + "; per-position p: " + per_pos + "; log-lik mean baseline " +
               fmt_p(mean_a) + " candidate " + fmt_p(mean_b) + ", Mann-Whitney p " + fmt_p(mw.p_value);
  return out;
}

// Greedy equality from the sample lines of repeat 0: every candidate turn against the
// baseline's turn of the same prompt, token for token.
CheckOutcome greedy_equality(const std::vector<const json*>& cand_lines, const std::vector<const json*>& base_lines) {
  auto by_turn = [](const std::vector<const json*>& lines) {
    std::vector<std::pair<std::string, Tokens>> out;
    for (const json* l : lines) {
      if (l->at("repeat").get<int64_t>() != 0) continue;
      const int64_t turn = l->value("turn", int64_t{0});
      out.emplace_back(l->at("prompt").get<std::string>() + (turn ? " turn " + std::to_string(turn + 1) : ""),
                       l->at("tokens").get<Tokens>());
    }
    return out;
  };
  const auto cand = by_turn(cand_lines), base = by_turn(base_lines);
  std::map<std::string, Tokens> base_of(base.begin(), base.end());
  std::vector<std::string> ids;
  std::vector<Tokens> b, c;
  for (const auto& [id, toks] : cand) {
    ids.push_back(id);
    c.push_back(toks);
    b.push_back(base_of.count(id) ? base_of.at(id) : Tokens{});
  }
  return greedy_equality_check(ids, b, c);
}

}  // namespace specdec::harness
