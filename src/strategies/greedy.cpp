// greedy: argmax of the (repetition-penalised) target logits at every step.
#include "sampling/processors.h"
#include "strategies/batch.h"
#include "strategies/common.h"
#include "strategies/registry.h"

namespace specdec::strategies {
namespace {

class Greedy : public Strategy {
 public:
  explicit Greedy(const Params& p) : cfg_(processor_config(p)), constraint_(p.constraint()) {}
  Result generate(const Request& req, const TokenCallback& on_token) override {
    return autoregressive_decode(req, on_token, pick(), constraint_, &cfg_);
  }
  std::vector<Result> generate_batch(const std::vector<Request>& requests, const BatchOptions& options,
                                     const BatchTokenCallback& on_token) override {
    return autoregressive_decode_batch(requests, options, on_token, [&](const Request&) { return pick(); }, constraint_,
                                       &cfg_);
  }

 private:
  // The picker (structured output's mask is the decoding loop's, before it).
  PickToken pick() const {
    return [this](const at::Tensor& row, const Tokens& context) {
      return sampling::greedy_token(row, cfg_, context);  // [V] -> arg-max id
    };
  }
  sampling::ProcessorConfig cfg_;
  std::shared_ptr<const sampling::Constraint> constraint_;  // structured output; null: none
};

}  // namespace

StrategyInfo greedy_info() {
  StrategyInfo info{"greedy", "argmax decoding of the target model (the speculative baseline)", {},
                    [](const Params& p) { return std::make_unique<Greedy>(p); }};
  info.takes_constraint = true;
  return info;
}

}  // namespace specdec::strategies
