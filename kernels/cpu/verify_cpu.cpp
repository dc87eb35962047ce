// CPU verification: one thread per sequence, parallel over the batch on the thread pool. The row
// logic is math::verify_row, the same code the CUDA kernel runs.
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/kernels_internal.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace specdec::kernels {

const char* mode_name(VerifyMode m) {
  switch (m) {
    case VerifyMode::greedy: return "greedy";
    case VerifyMode::sampling: return "sampling";
    case VerifyMode::tokens_only: return "tokens_only";
    case VerifyMode::block: return "block";
  }
  return "unknown";
}

namespace detail {

void check_verify_args(const VerifyArgs& a, const char* who) {
  SD_CHECK(a.batch >= 0, who, ": batch = ", a.batch, " must be >= 0");
  SD_CHECK(a.gamma >= 0, who, ": gamma = ", a.gamma, " must be >= 0");
  SD_CHECK(a.vocab > 0 && a.vocab <= INT32_MAX, who, ": vocab = ", a.vocab, " must be in [1, 2^31)");
  SD_CHECK(a.p, who, ": p (target probs [B, gamma+1, V]) is null");
  SD_CHECK(a.n_accepted && a.out_tokens, who, ": outputs n_accepted [B] / out_tokens [B, gamma+1] are null");
  SD_CHECK(a.gamma == 0 || (a.draft_tokens && a.n_draft), who,
           ": draft_tokens [B, gamma] and n_draft [B] are required when gamma = ", a.gamma, " > 0");
  SD_CHECK(a.mode == VerifyMode::greedy || a.mode == VerifyMode::sampling || a.mode == VerifyMode::tokens_only ||
               a.mode == VerifyMode::block,
           who, ": unknown mode ", static_cast<int>(a.mode));
  if ((a.mode == VerifyMode::sampling || a.mode == VerifyMode::block) && a.gamma > 0)
    SD_CHECK(a.q, who, ": ", mode_name(a.mode), " mode needs q (draft probs [B, gamma, V])");
  if (a.mode != VerifyMode::greedy)
    SD_CHECK(a.uniforms, who, ": ", mode_name(a.mode), " mode needs uniforms [B, gamma+1]");
}

void throw_row_error(const char* who, int64_t b, int32_t status, int32_t i) {
  switch (status) {
    case math::kBadNDraft:
      fail(who, ": n_draft[", b, "] = ", i, " is outside [0, gamma]");
    case math::kBadToken:
      fail(who, ": draft_tokens[", b, "][", i, "] is outside [0, vocab)");
    case math::kBadUniform:
      fail(who, ": uniforms[", b, "][", i, "] is not in [0, 1]");
    case math::kNoMass:
      fail(who, ": p[", b, "][", i, "] has no positive probability to sample from (or holds NaN)");
    default:
      fail(who, ": row ", b, " failed with status ", status);
  }
}

}  // namespace detail

void verify_cpu(const VerifyArgs& args) {
  detail::check_verify_args(args, "verify_cpu");
  std::vector<math::RowResult> results(static_cast<size_t>(args.batch));
  // Errors are collected per row and thrown after all rows ran, so the outputs of the good
  // rows are complete. Each row reads at least one full [V] row; small problems stay on the
  // calling thread.
  const bool split = args.batch > 1 && args.batch * args.vocab >= (int64_t{1} << 16);
  parallel::parallel_for(args.batch, split ? 1 : args.batch, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const math::RowView row = math::row_view(args, b);
      cpu::CpuRowOps ops;
      math::RowResult res = math::verify_row(row, ops);
      args.n_accepted[b] = res.status == math::kRowOk ? res.n_accepted : res.status;
      math::write_row_output(row, res, args.out_tokens + b * (args.gamma + 1));
      results[static_cast<size_t>(b)] = res;
    }
  });
  for (int64_t b = 0; b < args.batch; ++b) {
    const math::RowResult& r = results[static_cast<size_t>(b)];
    if (r.status != math::kRowOk) detail::throw_row_error("verify_cpu", b, r.status, r.bad_index);
  }
}

namespace detail {
void check_pick_args(const PickArgs& a, const char* who) {
  SD_CHECK(a.rows >= 0, who, ": rows = ", a.rows, " must be >= 0");
  SD_CHECK(a.vocab > 0 && a.vocab <= INT32_MAX, who, ": vocab = ", a.vocab, " must be in [1, 2^31)");
  SD_CHECK(a.rows == 0 || (a.scores && a.out_tokens), who, ": scores [rows, V] / out_tokens [rows] are null");
}
}  // namespace detail

void pick_cpu(const PickArgs& args) {
  detail::check_pick_args(args, "pick_cpu");
  const cpu::CpuRowOps ops;
  for (int64_t r = 0; r < args.rows; ++r) {
    const float* row = args.scores + r * args.vocab;  // [V]
    if (!args.uniforms) {
      args.out_tokens[r] = ops.argmax(row, args.vocab);
      continue;
    }
    const double u = args.uniforms[r];
    SD_CHECK(u >= 0.0 && u < 1.0, "pick_cpu: uniforms[", r, "] = ", u, " outside [0, 1)");
    args.out_tokens[r] = ops.sample(row, nullptr, args.vocab, u);
  }
}

void check_verify_status(const int32_t* n_accepted, const int32_t* out_tokens, int64_t batch, int64_t out_stride,
                         const char* who) {
  SD_CHECK(batch >= 0 && out_stride >= 1, who, ": batch = ", batch, ", out_stride = ", out_stride,
           " (need batch >= 0, out_stride >= 1)");
  if (batch == 0) return;
  SD_CHECK(n_accepted && out_tokens, who, ": n_accepted [B] / out_tokens [B, stride] are null");
  for (int64_t b = 0; b < batch; ++b)
    if (n_accepted[b] < 0) detail::throw_row_error(who, b, n_accepted[b], out_tokens[b * out_stride]);
}

}  // namespace specdec::kernels
