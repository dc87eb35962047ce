// Worked example for docs/adding.md, registered in examples/register.cpp and run through the
// registry by tests/unit/test_strategies_example.cpp (and through the CLI that carries the
// examples, build/specdec_with_examples, by tests/integration/test_cli_extensions_smollm2.cpp).
// "annealed": sampling whose temperature falls linearly from t_start to t_end over
// max_new_tokens, so a generation starts diverse and ends nearly greedy.
#include "core/error.h"
#include "core/rng.h"
#include "sampling/processors.h"
#include "strategies/common.h"
#include "strategies/registry.h"

namespace specdec::strategies {
namespace {

class Annealed : public Strategy {
 public:
  explicit Annealed(const Params& p)
      : cfg_(processor_config(p)), t_start_(p.get_float("t_start")), t_end_(p.get_float("t_end")) {
    // Checked at creation, so `specdec validate` and `generate` report it before loading a model.
    SD_CHECK(t_start_ >= 0 && t_end_ >= 0, "annealed: t_start and t_end must be >= 0, got t_start=", t_start_,
             " t_end=", t_end_);
  }

  Result generate(const Request& req, const TokenCallback& on_token) override {
    Rng rng(req.seed);  // randomness is an input: same seed, same tokens
    const Tokens::size_type n_prompt = req.prompt.size();
    const double n_max = double(std::max<int64_t>(1, req.stop.max_new_tokens - 1));
    // autoregressive_decode owns the loop, KV cache, stop handling, streaming and stats;
    // a strategy of this kind only says how to pick the next token.
    return autoregressive_decode(req, on_token, [&](const at::Tensor& row, const Tokens& context) {
      sampling::ProcessorConfig step_cfg = cfg_;
      step_cfg.temperature = t_start_ + (t_end_ - t_start_) * double(context.size() - n_prompt) / n_max;
      at::Tensor probs = sampling::probabilities(row.unsqueeze(0), step_cfg, context);  // [1, V]
      return sampling::sample_from(probs, rng.uniform());
    });
  }

 private:
  sampling::ProcessorConfig cfg_;
  double t_start_, t_end_;
};

}  // namespace

StrategyInfo annealed_info() {
  return {"annealed",
          "sampling with a temperature falling linearly from t_start to t_end",
          {
              {"t_start", "float", "1.2", "temperature of the first token"},
              {"t_end", "float", "0.2", "temperature of the last token"},
          },
          [](const Params& p) { return std::make_unique<Annealed>(p); }};
}

}  // namespace specdec::strategies
