// TraceRecorder: reduces each round of a generation to the rows the trace view shows.
#include "strategies/trace.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "kernels/verify_math.h"
#include "model/device.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"

namespace specdec::strategies {
namespace {

// p row a node was compared against: the row of its parent (row 0 = the root).
int64_t row_of(const DraftProposal& d, int64_t node) { return d.is_chain() ? node : d.parents[node] + 1; }

double ratio_accept(double p, double q) { return q > 0 ? std::min(1.0, p / q) : 1.0; }

}  // namespace

TraceRecorder::TraceRecorder(std::shared_ptr<tokenizer::Tokenizer> tokenizer, const Params& resolved, int64_t top_k)
    : tokenizer_(std::move(tokenizer)), proc_(processor_config(resolved)), top_k_(top_k) {
  SD_CHECK(tokenizer_ != nullptr, "trace: needs the target's tokenizer to show token text");
  SD_CHECK(top_k_ >= 1, "trace: top_k must be >= 1, got ", top_k_);
  const SpeculativeParams* spec = resolved.find_typed<SpeculativeParams>();  // null: not speculative
  block_verify_ = spec && spec->block_verify;
}

nlohmann::json TraceRecorder::token_json(TokenId id) const {
  return {{"token", id}, {"piece", tokenizer_->decode({id}, false)}};
}

// The top_k entries of a row as [token, probability, piece], likeliest first (ties: lower id).
nlohmann::json TraceRecorder::top_entries(const float* row, int64_t n_vocab) const {
  std::vector<int32_t> ids(n_vocab);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = std::min(top_k_, n_vocab);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < k && row[ids[i]] > 0; ++i)
    out.push_back({ids[i], row[ids[i]], tokenizer_->decode({ids[i]}, false)});
  return out;
}

// The phases since the previous call; setup and prefill belong to the generation, not a round.
nlohmann::json TraceRecorder::round_phases(const PhaseTimes& cumulative) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& f : PhaseTimes::fields()) {
    const double ms = cumulative.*f.ms - seen_.*f.ms;
    if (f.ms == &PhaseTimes::setup) setup_ms_ += ms;
    else if (f.ms == &PhaseTimes::prefill) prefill_ms_ += ms;
    else out[f.name] = ms;
  }
  seen_ = cumulative;
  return out;
}

void TraceRecorder::round(const DraftProposal& d, const at::Tensor& p_in, const std::vector<int32_t>& path,
                          const Tokens& committed, const PhaseTimes& cumulative) {
  const at::Tensor p = model::on_host(p_in).contiguous();  // [N+1, V]
  const at::Tensor q = d.q.defined() ? model::on_host(d.q).contiguous() : at::Tensor();  // [N, V]
  const int64_t n = d.size(), n_vocab = p.size(1);
  SD_CHECK(p.size(0) == n + 1, "trace: p has ", p.size(0), " rows for ", n, " draft nodes");
  const float* pp = p.data_ptr<float>();
  const float* qq = q.defined() ? q.data_ptr<float>() : nullptr;
  // Rows the verifier visited: the root, then one per accepted node; the last one is where the
  // corrected or bonus token came from.
  std::vector<int64_t> visited = {0};
  for (int32_t node : path) visited.push_back(node + 1);
  const int64_t final_row = visited.back();
  // The child accepted at each visited row (-1 at the final row): children are tried in node
  // order, so the ones before it (all of them at the final row) were rejected.
  auto accepted_child = [&](int64_t row) -> int64_t {
    for (size_t i = 0; i + 1 < visited.size(); ++i)
      if (visited[i] == row) return path[i];
    return -1;
  };
  std::vector<bool> needs_row(n + 1, false);
  needs_row[final_row] = true;
  nlohmann::json nodes = nlohmann::json::array();
  std::vector<int64_t> final_children;  // nodes tried at the final row, in order
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = row_of(d, i);
    const TokenId x = d.tokens[i];
    needs_row[row] = true;
    const bool row_visited = std::find(visited.begin(), visited.end(), row) != visited.end();
    const int64_t chosen = row_visited ? accepted_child(row) : -1;
    const char* status = !row_visited ? "skipped" : chosen == i ? "accepted" : (chosen < 0 || i < chosen) ? "rejected" : "skipped";
    if (row == final_row) final_children.push_back(i);
    nlohmann::json node = token_json(x);
    node["parent"] = d.is_chain() ? i - 1 : d.parents[i];
    node["depth"] = d.depth(i);
    node["row"] = row;
    node["status"] = status;
    const double px = pp[row * n_vocab + x];
    node["p"] = px;
    if (qq) {
      const double qx = qq[i * n_vocab + x];
      node["q"] = qx;
      node["accept_prob"] = ratio_accept(px, qx);
      node["q_top"] = top_entries(qq + i * n_vocab, n_vocab);
    }
    nodes.push_back(std::move(node));
  }
  nlohmann::json p_top = nlohmann::json::array();
  for (int64_t r = 0; r <= n; ++r) p_top.push_back(needs_row[r] ? top_entries(pp + r * n_vocab, n_vocab) : nullptr);

  nlohmann::json emitted = nlohmann::json::array();
  for (size_t j = 0; j < committed.size(); ++j) {
    nlohmann::json e = token_json(committed[j]);
    if (j < path.size()) {
      e["kind"] = "accepted";
      e["node"] = path[j];
      e["row"] = row_of(d, path[j]);
    } else {
      e["kind"] = n == 0 ? "target" : final_children.empty() ? "bonus" : "corrected";
      e["row"] = final_row;
      e["p"] = pp[final_row * n_vocab + committed[j]];
      // The corrected token of speculative sampling was drawn from the residual the rejected
      // children left: norm(max(0, p - q_1)), then norm(max(0, r - q_2)), ... (a chain has one).
      if (!final_children.empty() && qq && !proc_.greedy() && !block_verify_) {
        std::vector<double> r(pp + final_row * n_vocab, pp + (final_row + 1) * n_vocab);
        double z = 1.0;
        for (int64_t c : final_children) {
          std::vector<double> next(n_vocab);
          double mass = 0;
          for (int64_t v = 0; v < n_vocab; ++v) mass += next[v] = kernels::math::sample_weight(r.data(), qq + c * n_vocab, v, 1.0 / z);
          if (mass <= 0) break;  // r <= q_c up to rounding: the verifier samples r itself
          r.swap(next);
          z = mass;
        }
        std::vector<float> residual(n_vocab);
        for (int64_t v = 0; v < n_vocab; ++v) residual[v] = static_cast<float>(r[v] / z);
        e["residual_top"] = top_entries(residual.data(), n_vocab);
      }
    }
    emitted.push_back(std::move(e));
  }
  rounds_.push_back({{"kind", n == 0 ? "target" : "draft"}, {"tree", !d.is_chain()}, {"nodes", std::move(nodes)},
                     {"path", path}, {"emitted", std::move(emitted)}, {"p_top", std::move(p_top)},
                     {"has_q", qq != nullptr}, {"phases_ms", round_phases(cumulative)}});
}

void TraceRecorder::step(const at::Tensor& logits_row, const Tokens& context, const PhaseTimes& cumulative) {
  SD_CHECK(!context.empty(), "trace: a step needs the chosen token at the end of its context");
  const Tokens before(context.begin(), context.end() - 1);
  const at::Tensor p = model::on_host(sampling::probabilities(logits_row.unsqueeze(0), proc_, before)).contiguous();
  const float* pp = p.data_ptr<float>();
  nlohmann::json e = token_json(context.back());
  e["kind"] = "step";
  e["row"] = 0;
  e["p"] = pp[context.back()];
  rounds_.push_back({{"kind", "step"}, {"tree", false}, {"nodes", nlohmann::json::array()},
                     {"path", nlohmann::json::array()}, {"emitted", nlohmann::json::array({std::move(e)})},
                     {"p_top", nlohmann::json::array({top_entries(pp, p.size(1))})}, {"has_q", false},
                     {"phases_ms", round_phases(cumulative)}});
}

nlohmann::json TraceRecorder::to_json() const {
  return {{"top_k", top_k_}, {"setup_ms", setup_ms_}, {"prefill_ms", prefill_ms_}, {"rounds", rounds_}};
}

}  // namespace specdec::strategies
