#include "model/layer_subset.h"

#include "core/error.h"

namespace specdec::model {
namespace {

class LayerSubset final : public CausalLM {
 public:
  LayerSubset(std::shared_ptr<CausalLM> base, std::vector<int64_t> keep) : base_(std::move(base)), keep_(std::move(keep)) {}
  const ModelConfig& config() const override { return base_->config(); }
  at::Device device() const override { return base_->device(); }
  KVCache make_cache(int64_t batch, int64_t max_seq) const override { return base_->make_cache(batch, max_seq); }
  using CausalLM::forward;
  ForwardResult forward(const at::Tensor& tokens, const std::vector<int64_t>& start_pos, KVCache& cache,
                        const ForwardOptions& options) override {
    SD_CHECK(options.layers.empty(), "layer subset: a forward of the subset model cannot choose its own layers");
    ForwardOptions o = options;
    o.layers = keep_;
    return base_->forward(tokens, start_pos, cache, o);
  }
  // The layers' share of the weights; the embedding row and the output head are read anyway,
  // so this slightly underestimates.
  int64_t weight_bytes() const override {
    return base_->weight_bytes() * static_cast<int64_t>(keep_.size()) / base_->config().n_layers;
  }
  int64_t resident_weight_bytes() const override { return 0; }  // the base's weights, shared
  bool ragged_batches() const override { return base_->ragged_batches(); }

 private:
  std::shared_ptr<CausalLM> base_;
  std::vector<int64_t> keep_;
};

}  // namespace

std::shared_ptr<CausalLM> make_layer_subset(std::shared_ptr<CausalLM> base, std::vector<int64_t> keep) {
  SD_CHECK(base != nullptr, "layer subset: no base model");
  const int64_t L = base->config().n_layers;
  SD_CHECK(!keep.empty(), "layer subset: keep at least one of the ", L, " layers");
  for (size_t i = 0; i < keep.size(); ++i)
    SD_CHECK(keep[i] >= 0 && keep[i] < L && (i == 0 || keep[i] > keep[i - 1]), "layer subset: layer ", keep[i],
             " (entry ", i, ") must be in [0, ", L, ") and above the previous entry");
  return std::make_shared<LayerSubset>(std::move(base), std::move(keep));
}

}  // namespace specdec::model
