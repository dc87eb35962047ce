// Worked example for docs/adding.md ("Adding a drafter"), registered in examples/register.cpp
// and run by tests/unit/test_strategies_example.cpp.
// "repeat_last": once the last committed token has repeated repeat_min_run times in a row,
// guess that the run goes on (indentation, "====" rules, runs of newlines or spaces) and
// propose it max_depth more times. A guess costs only verify rows, never correctness: the
// target keeps what it agrees with.
#include "core/error.h"
#include "speculative/proposer.h"

namespace specdec::strategies {
namespace {

// The drafter's parameters: a struct, each field declared once in the table below.
struct RepeatLastParams {
  int64_t min_run = 0;
};

class RepeatLastDrafter : public Drafter {
 public:
  explicit RepeatLastDrafter(int64_t min_run) : min_run_(min_run) {}

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    DraftProposal out;  // a chain: parents stay empty
    if (max_depth <= 0 || seq.empty()) return out;
    int64_t run = 1;
    for (size_t i = seq.size() - 1; i > 0 && seq[i - 1] == seq.back() && run < min_run_; --i) ++run;
    if (run >= min_run_) out.tokens.assign(max_depth, seq.back());
    return out;
  }
  // No distribution q (out.q stays undefined; has_distribution() keeps its default, false):
  // the verifier accepts draft tokens while they equal the target's own choices (tokens_only
  // mode), which keeps the output distribution exactly the target's.

 private:
  int64_t min_run_;
};

}  // namespace

DrafterInfo repeat_last_drafter_info() {
  DrafterInfo info;
  info.name = "repeat_last";
  info.description = "example: after a run of one token, proposes that token again (see docs/adding.md)";
  // Parameter names share one namespace with the speculative strategy and the other drafters:
  // prefix them with the drafter's name.
  // declare_params sets info.params (the schema) and info.parse: the registry parses and checks
  // the struct once, when the speculative params are resolved, before any model is loaded.
  declare_params(info, ParamTable<RepeatLastParams>()
                           .field("repeat_min_run", &RepeatLastParams::min_run, "2",
                                  "run length of the last token before repeat_last proposes it")
                           .finish([](RepeatLastParams& p) {
                             SD_CHECK(p.min_run >= 1, "drafter repeat_last: repeat_min_run must be >= 1, got ",
                                      p.min_run);
                           }));
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    return std::make_unique<RepeatLastDrafter>(ctx.params.typed<RepeatLastParams>().min_run);
  };
  return info;
}

}  // namespace specdec::strategies
