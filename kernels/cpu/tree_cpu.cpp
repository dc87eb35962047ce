// CPU token-tree verification: one thread per sequence, parallel over the batch. The row
// logic is math::verify_tree_row, the same code the CUDA kernel runs.
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/kernels_internal.h"
#include "kernels/cpu/row_ops_cpu.h"
#include "kernels/kernels.h"
#include "kernels/tree_math.h"

namespace specdec::kernels {

namespace detail {

void check_tree_args(const TreeVerifyArgs& a, const char* who) {
  SD_CHECK(a.batch >= 0, who, ": batch = ", a.batch, " must be >= 0");
  SD_CHECK(a.max_nodes >= 0 && a.max_nodes < INT32_MAX, who, ": max_nodes = ", a.max_nodes,
           " must be in [0, 2^31 - 1)");
  SD_CHECK(a.vocab > 0 && a.vocab <= INT32_MAX, who, ": vocab = ", a.vocab, " must be in [1, 2^31)");
  SD_CHECK(a.mode == VerifyMode::greedy || a.mode == VerifyMode::sampling || a.mode == VerifyMode::tokens_only, who,
           ": mode ", mode_name(a.mode), " is not defined for trees (greedy, sampling or tokens_only)");
  SD_CHECK(a.p, who, ": p (target probs [B, N+1, V]) is null");
  SD_CHECK(a.n_accepted && a.out_tokens && (a.path || a.max_nodes == 0), who,
           ": outputs n_accepted [B] / path [B, N] / out_tokens [B, N+1] are null");
  SD_CHECK(a.max_nodes == 0 || (a.tokens && a.parents && a.n_nodes), who,
           ": tokens [B, N], parents [B, N] and n_nodes [B] are required when max_nodes = ", a.max_nodes, " > 0");
  if (a.mode == VerifyMode::sampling) {
    SD_CHECK(a.q || a.max_nodes == 0, who, ": sampling mode needs q (draft probs [B, N, V])");
    SD_CHECK(a.scratch, who, ": sampling mode needs scratch [B, V] (the running residual)");
  }
  if (a.mode != VerifyMode::greedy)
    SD_CHECK(a.uniforms, who, ": ", mode_name(a.mode), " mode needs uniforms [B, N+1]");
}

void throw_tree_error(const char* who, int64_t b, int32_t status, int32_t i) {
  switch (status) {
    case math::kBadNDraft:
      fail(who, ": n_nodes[", b, "] = ", i, " is outside [0, max_nodes]");
    case math::kBadToken:
      fail(who, ": tokens[", b, "][", i, "] is outside [0, vocab)");
    case math::kBadParent:
      fail(who, ": parents[", b, "][", i, "] is outside [-1, ", i, ") (nodes must be in topological order)");
    case math::kBadUniform:
      fail(who, ": uniforms[", b, "][", i, "] is not in [0, 1]");
    case math::kNoMass:
      fail(who, ": p[", b, "][", i, "] (or the residual left by its children's q rows) has no positive ",
           "probability to sample from (or holds NaN)");
    default:
      fail(who, ": sequence ", b, " failed with status ", status);
  }
}

}  // namespace detail

void verify_tree_cpu(const TreeVerifyArgs& args) {
  detail::check_tree_args(args, "verify_tree_cpu");
  std::vector<math::TreeResult> results(static_cast<size_t>(args.batch));
  // As verify_cpu: errors are thrown after all sequences ran; small problems stay on the
  // calling thread.
  const bool split = args.batch > 1 && args.batch * args.vocab >= (int64_t{1} << 16);
  parallel::parallel_for(args.batch, split ? 1 : args.batch, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const math::TreeView tree = math::tree_view(args, b);
      cpu::CpuRowOps ops;
      const math::TreeResult res = math::verify_tree_row(tree, ops);
      args.n_accepted[b] = res.status == math::kRowOk ? res.n_accepted : res.status;
      math::write_tree_output(tree, res, args.path + b * args.max_nodes, args.out_tokens + b * (args.max_nodes + 1));
      results[static_cast<size_t>(b)] = res;
    }
  });
  for (int64_t b = 0; b < args.batch; ++b) {
    const math::TreeResult& r = results[static_cast<size_t>(b)];
    if (r.status != math::kRowOk) detail::throw_tree_error("verify_tree_cpu", b, r.status, r.bad_index);
  }
}

void check_tree_status(const int32_t* n_accepted, const int32_t* out_tokens, int64_t batch, int64_t out_stride,
                       const char* who) {
  SD_CHECK(batch >= 0 && out_stride >= 1, who, ": batch = ", batch, ", out_stride = ", out_stride,
           " (need batch >= 0, out_stride >= 1)");
  if (batch == 0) return;
  SD_CHECK(n_accepted && out_tokens, who, ": n_accepted [B] / out_tokens [B, stride] are null");
  for (int64_t b = 0; b < batch; ++b)
    if (n_accepted[b] < 0) detail::throw_tree_error(who, b, n_accepted[b], out_tokens[b * out_stride]);
}

}  // namespace specdec::kernels
