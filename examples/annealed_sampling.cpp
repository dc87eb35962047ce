// Worked example for docs/adding.md, registered in examples/register.cpp and run through the
// registry by tests/unit/test_strategies_example.cpp (and through the CLI that carries the
// examples, build/specdec_with_examples, by tests/integration/test_cli_extensions_smollm2.cpp).
// "annealed": sampling whose temperature falls linearly from t_start to t_end over
// max_new_tokens, so a generation starts diverse and ends nearly greedy.
#include "core/error.h"
#include "core/rng.h"
#include "sampling/processors.h"
#include "strategies/common.h"
#include "strategies/param_table.h"
#include "strategies/registry.h"

namespace specdec::strategies {
namespace {

// The strategy's parameters: a struct, each field declared once in annealed_info()'s table.
struct AnnealedParams {
  double t_start = 0, t_end = 0;
};

class Annealed : public Strategy {
 public:
  // p: resolved, its AnnealedParams parsed and checked by the registry.
  explicit Annealed(const Params& p)
      : cfg_(processor_config(p)), t_start_(p.typed<AnnealedParams>().t_start), t_end_(p.typed<AnnealedParams>().t_end) {}

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
  StrategyInfo info;
  info.name = "annealed";
  info.description = "sampling with a temperature falling linearly from t_start to t_end";
  // The schema and the parser from one table; the checks run in resolve(), so `specdec validate`
  // and `generate` report a bad value before loading a model.
  declare_params(info, ParamTable<AnnealedParams>()
                           .field("t_start", &AnnealedParams::t_start, "1.2", "temperature of the first token")
                           .field("t_end", &AnnealedParams::t_end, "0.2", "temperature of the last token")
                           .finish([](AnnealedParams& a) {
                             SD_CHECK(a.t_start >= 0 && a.t_end >= 0,
                                      "annealed: t_start and t_end must be >= 0, got t_start=", a.t_start,
                                      " t_end=", a.t_end);
                           }));
  info.factory = [](const Params& p) { return std::make_unique<Annealed>(p); };
  return info;
}

}  // namespace specdec::strategies
