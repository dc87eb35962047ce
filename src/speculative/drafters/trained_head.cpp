// Shared parts of the trained drafters (see trained_head.h).
#include "speculative/drafters/trained_head.h"

#include <filesystem>
#include <limits>
#include <map>
#include <mutex>

#include "core/error.h"
#include "model/device.h"

namespace specdec::strategies {

LoadedHead::LoadedHead(const model::DraftHead& trained, const std::shared_ptr<model::CausalLM>& target)
    : head_(trained), target_(target), device_(target->device()), n_vocab_(target->config().n_vocab) {
  if (device_.is_cpu())
    head_.pack(at::kBFloat16);
  else
    head_.to(device_);
  const std::vector<int64_t>& ids = head_.config().draft_vocab;
  if (ids.empty()) return;
  vocab_ = at::tensor(ids, at::kLong).to(device_);
  const at::Tensor rows = target->head_rows(vocab_).to(device_, at::kFloat).contiguous();  // [Vd, d]
  if (device_.is_cpu())
    vocab_head_ = model::Linear(rows, at::Tensor(), at::kBFloat16);
  else
    vocab_rows_ = rows;
}

at::Tensor LoadedHead::logits(const at::Tensor& features) const {
  if (!vocab_.defined()) {
    const std::shared_ptr<model::CausalLM> target = target_.lock();
    SD_CHECK(target != nullptr, "trained drafter: its target model was released");
    return target->output_head(features);  // the target's head, on its device
  }
  const at::Tensor x = features.to(device_, at::kFloat).contiguous();
  const at::Tensor sub = device_.is_cpu() ? vocab_head_(x) : at::linear(x, vocab_rows_);  // [n, Vd]
  at::Tensor full = at::full({sub.size(0), n_vocab_}, -std::numeric_limits<float>::infinity(), sub.options());
  return full.index_copy_(1, vocab_, sub);
}

std::shared_ptr<const LoadedHead> head_for(const std::string& drafter, const std::string& key, const std::string& dir,
                                           const std::string& kind, const Request& req) {
  SD_CHECK(!dir.empty(), "speculative: drafter '", drafter, "' needs a trained head: --set ", key,
           "=DIR (a directory written by `specdec train-drafter --kind ", kind, "`)");
  // Loaded and prepared once per process, file version and target: a head retrained into the
  // same directory is read again; a freed target's address may come back (serves() tells).
  static std::mutex mu;
  static std::map<std::pair<std::string, const model::CausalLM*>, std::shared_ptr<const LoadedHead>> prepared;
  std::error_code ec;
  const auto stamp = std::filesystem::last_write_time(dir + "/head.safetensors", ec);
  const std::string id = dir + "@" + (ec ? "?" : std::to_string(stamp.time_since_epoch().count()));
  const std::lock_guard<std::mutex> lock(mu);
  auto& slot = prepared[{id, req.target.get()}];
  const bool fresh = !slot || !slot->serves(req.target);
  model::DraftHead loaded;
  if (fresh) {
    try {
      loaded = model::DraftHead::load(dir);
    } catch (const Error& e) {
      fail("speculative: ", key, "='", dir, "': ", e.what());
    }
  }
  const model::DraftHeadConfig& c = fresh ? loaded.config() : slot->head().config();
  SD_CHECK(c.kind == kind, "speculative: ", key, "='", dir, "' holds a ", c.kind, " head, not a ", kind,
           " head (drafter '", drafter, "')");
  model::check_head_target(dir, c.target, model::describe_target(*req.target, "the request's target"));
  if (fresh) slot = std::make_shared<const LoadedHead>(loaded, req.target);  // after the checks: it reads the target
  return slot;
}

void TargetFeatures::add_prompt(const at::Tensor& hidden) {
  if (hidden.defined()) add(hidden.to(at::kFloat));  // stays on the target's device, where the head runs
}

void TargetFeatures::add_round(const at::Tensor& hidden, const std::vector<int32_t>& accepted) {
  if (!hidden.defined()) return;
  std::vector<int64_t> rows = {0};  // fed row 0 is the root, node i is row i + 1
  for (int32_t node : accepted) rows.push_back(node + 1);
  const at::Tensor h = hidden.to(at::kFloat);
  add(h.index_select(0, model::to_device_async(at::tensor(rows, at::kLong), h.device())));
}

void TargetFeatures::add(const at::Tensor& rows) {
  pending_.push_back(rows);
  n_seen_ += rows.size(0);
  last_ = rows.narrow(0, rows.size(0) - 1, 1);
}

at::Tensor TargetFeatures::take() {
  if (pending_.empty()) return at::Tensor();
  at::Tensor out = pending_.size() == 1 ? pending_[0] : at::cat(pending_, 0);
  pending_.clear();
  return out;
}

}  // namespace specdec::strategies
