// sampling: ancestral sampling from the processed target distribution, seeded by
// Request::seed so a run is reproducible.
#include "core/rng.h"
#include "sampling/processors.h"
#include "strategies/batch.h"
#include "strategies/common.h"
#include "strategies/registry.h"

namespace specdec::strategies {
namespace {

class Sampling : public Strategy {
 public:
  explicit Sampling(const Params& p)
      : cfg_(processor_config(p)), constraint_(p.constraint()) {}
  Result generate(const Request& req, const TokenCallback& on_token) override {
    return autoregressive_decode(req, on_token, pick(req), constraint_);
  }
  std::vector<Result> generate_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                     const BatchTokenCallback& on_token) override {
    return autoregressive_decode_batch(requests, options, on_token, [&](const Request& req) { return pick(req); },
                                       constraint_);
  }

 private:
  // The request's sampler: its own RNG stream from Request::seed, whatever else runs beside it
  // (structured output's mask is the decoding loop's, before it).
  PickToken pick(const Request& req) const {
    auto rng = std::make_shared<Rng>(req.seed);
    return [this, rng](const at::Tensor& row, const Tokens& context) {
      if (cfg_.greedy()) return sampling::greedy_token(row, cfg_, context);
      at::Tensor probs = sampling::probabilities(row.unsqueeze(0), cfg_, context);  // [1, V]
      return sampling::sample_from(probs, rng->uniform());
    };
  }
  sampling::ProcessorConfig cfg_;
  std::shared_ptr<const sampling::Constraint> constraint_;  // structured output; null: none
};

}  // namespace

StrategyInfo sampling_info() {
  StrategyInfo info{"sampling", "seeded ancestral sampling from the processed target distribution", {},
                    [](const Params& p) { return std::make_unique<Sampling>(p); }};
  info.takes_constraint = true;
  return info;
}

}  // namespace specdec::strategies
