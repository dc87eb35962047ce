// The self-check's wrapping backend (planted_bug.h).
#include "harness/planted_bug.h"

#include <vector>

#include "core/error.h"
#include "sampling/processors.h"

namespace specdec::harness {
namespace {

class ResidualBug final : public kernels::Backend {
 public:
  explicit ResidualBug(std::shared_ptr<kernels::Backend> real) : real_(std::move(real)) {}

  kernels::Device device() const override { return real_->device(); }

  void verify(const kernels::VerifyArgs& a) override {
    real_->verify(a);
    using kernels::VerifyMode;
    const int64_t V = a.vocab;
    std::vector<float> row(static_cast<size_t>(V));
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t n_draft = a.n_draft ? a.n_draft[b] : a.gamma;
      const int32_t acc = a.n_accepted[b];
      if (acc >= n_draft) continue;  // all accepted: the bonus token stays correct
      int32_t& next = a.out_tokens[b * (a.gamma + 1) + acc];
      if (a.mode == VerifyMode::greedy || a.mode == VerifyMode::tokens_only) {
        const int32_t* x = a.draft_tokens + b * a.gamma + acc;
        if (a.draft_tokens_on_device)  // a draft model's chain, unread (Backend::verify)
          real_->to_host(&next, x, sizeof next);
        else
          next = *x;
      } else {  // sampling, block: p at the rejected position, with the final-sample uniform
        real_->to_host(row.data(), a.p + (b * (a.gamma + 1) + acc) * V, sizeof(float) * row.size());
        next = sampling::sample_from(row.data(), V, a.uniforms[b * (a.gamma + 1) + a.gamma]);
      }
    }
  }

  void verify_tree(const kernels::TreeVerifyArgs&) override {
    fail("checks.inject_residual_bug plants its bug in chain verification only, but the checked strategy's "
         "drafter proposed a token tree (use a chain drafter for the self-check)");
  }
  void kv_compact(const kernels::CompactArgs& a) override { real_->kv_compact(a); }
  void kv_reorder(float* dst, const float* src, const int64_t* idx, int64_t batch, int64_t row_elems) override {
    real_->kv_reorder(dst, src, idx, batch, row_elems);
  }
  void pick(const kernels::PickArgs& a) override { real_->pick(a); }
  void to_host(void* dst, const void* src, size_t bytes) override { real_->to_host(dst, src, bytes); }

 private:
  std::shared_ptr<kernels::Backend> real_;
};

}  // namespace

std::shared_ptr<kernels::Backend> residual_bug_backend(std::shared_ptr<kernels::Backend> real) {
  SD_CHECK(real != nullptr, "residual_bug_backend: no backend to wrap");
  return std::make_shared<ResidualBug>(std::move(real));
}

}  // namespace specdec::harness
