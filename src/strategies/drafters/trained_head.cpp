// Shared parts of the trained drafters (see trained_head.h).
#include "strategies/drafters/trained_head.h"

#include <filesystem>
#include <map>
#include <mutex>

#include "core/error.h"

namespace specdec::strategies {

std::shared_ptr<const model::DraftHead> head_for(const std::string& drafter, const std::string& key,
                                                 const std::string& dir, const std::string& kind, const Request& req) {
  SD_CHECK(!dir.empty(), "speculative: drafter '", drafter, "' needs a trained head: --set ", key,
           "=DIR (a directory written by `specdec train-drafter --kind ", kind, "`)");
  // Loaded once per process and file version: a head retrained into the same directory is
  // read again.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const model::DraftHead>> loaded;
  std::error_code ec;
  const auto stamp = std::filesystem::last_write_time(dir + "/head.safetensors", ec);
  const std::string id = dir + "@" + (ec ? "?" : std::to_string(stamp.time_since_epoch().count()));
  std::shared_ptr<const model::DraftHead> head;
  {
    const std::lock_guard<std::mutex> lock(mu);
    auto& slot = loaded[id];
    if (!slot) {
      try {
        slot = std::make_shared<const model::DraftHead>(model::DraftHead::load(dir));
      } catch (const Error& e) {
        loaded.erase(id);
        fail("speculative: ", key, "='", dir, "': ", e.what());
      }
    }
    head = slot;
  }
  SD_CHECK(head->config().kind == kind, "speculative: ", key, "='", dir, "' holds a ", head->config().kind,
           " head, not a ", kind, " head (drafter '", drafter, "')");
  model::check_head_target(dir, head->config().target, model::describe_target(*req.target, "the request's target"));
  return head;
}

void TargetFeatures::observe(const at::Tensor& hidden) {
  const at::Tensor h = hidden.to(at::kCPU).to(at::kFloat);
  if (in_round_) {
    stash_ = h;
    return;
  }
  pending_.push_back(h);  // the prefill: every row is a committed position
  n_seen_ += h.size(0);
  last_ = h.narrow(0, h.size(0) - 1, 1);
}

void TargetFeatures::commit(const std::vector<int32_t>& accepted) {
  in_round_ = false;
  if (!stash_.defined()) return;
  std::vector<int64_t> rows = {0};  // fed row 0 is the root, node i is row i + 1
  for (int32_t node : accepted) rows.push_back(node + 1);
  const at::Tensor kept = stash_.index_select(0, at::tensor(rows, at::kLong));
  pending_.push_back(kept);
  n_seen_ += kept.size(0);
  last_ = kept.narrow(0, kept.size(0) - 1, 1);
  stash_ = at::Tensor();
}

at::Tensor TargetFeatures::take() {
  if (pending_.empty()) return at::Tensor();
  at::Tensor out = pending_.size() == 1 ? pending_[0] : at::cat(pending_, 0);
  pending_.clear();
  return out;
}

TokenId draw_token(const at::Tensor& row, const sampling::ProcessorConfig& proc, const Tokens& context, Rng& rng,
                   std::vector<at::Tensor>& q_rows) {
  if (proc.greedy()) return sampling::greedy_token(row, proc, context);  // q one-hot: the greedy verifier ignores it
  at::Tensor q = sampling::probabilities(row.unsqueeze(0), proc, context);  // [1, V]
  q_rows.push_back(q);
  return sampling::sample_from(q, rng.uniform());
}

}  // namespace specdec::strategies
