// Host side of the CUDA launch contract (workspace sizes and checks). Plain C++, compiled in
// every build, so callers can size their workspace and the checks run without a device.
#include <cstdint>

#include "core/error.h"
#include "kernels/cpu/kernels_internal.h"
#include "kernels/kernels.h"
#include "kernels/verify_math.h"

namespace specdec::kernels {

namespace {

constexpr size_t kAlign = 256;  // section alignment inside a workspace
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // far beyond any device: rejects overflowing sizes

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// count * elem bytes, with the factors checked first so that the product cannot overflow.
size_t section_bytes(int64_t count, size_t elem, const char* who) {
  SD_CHECK(count >= 0 && count <= kMaxBytes / static_cast<int64_t>(elem), who, ": workspace section of ", count,
           " x ", elem, " bytes is too large");
  return align_up(static_cast<size_t>(count) * elem);
}

}  // namespace

namespace detail {

void check_workspace(const CudaLaunch& launch, size_t need, const char* who) {
  if (need == 0) return;
  SD_CHECK(launch.workspace_bytes >= need, who, ": workspace of ", launch.workspace_bytes, " bytes is too small (",
           need, " bytes needed; size it with the op's *_workspace_bytes())");
  SD_CHECK(launch.workspace, who, ": workspace is null (", need, " bytes needed)");
  SD_CHECK(reinterpret_cast<uintptr_t>(launch.workspace) % 16 == 0, who, ": workspace ", launch.workspace,
           " is not 16-byte aligned");
}

VerifyWorkspace verify_workspace_layout(const VerifyArgs& a, const char* who) {
  check_verify_args(a, who);
  SD_CHECK(a.gamma < INT32_MAX, who, ": gamma = ", a.gamma, " must be below 2^31 - 1");
  SD_CHECK(a.batch <= kMaxBytes / (a.gamma + 1), who, ": batch x (gamma + 1) is too large");
  const int64_t rows = a.batch * (a.gamma + 1);
  VerifyWorkspace w;
  size_t token = 0, weight = 0, mass = 0;
  if (a.mode == VerifyMode::greedy || a.mode == VerifyMode::tokens_only) {
    token = section_bytes(rows, sizeof(int32_t), who);
  } else {
    weight = section_bytes(rows, sizeof(double), who);
    SD_CHECK(rows <= kMaxBytes / math::kLanes, who, ": batch x (gamma + 1) is too large");
    mass = section_bytes(rows * math::kLanes, sizeof(double), who);
  }
  w.token = 0;
  w.weight = token;
  w.mass = token + weight;
  w.bytes = token + weight + mass;
  return w;
}

}  // namespace detail

size_t verify_cuda_workspace_bytes(const VerifyArgs& args) { 
  return detail::verify_workspace_layout(args, "verify_cuda_workspace_bytes").bytes;
 }

size_t verify_tree_cuda_workspace_bytes(const TreeVerifyArgs& args) {
  const char* who = "verify_tree_cuda_workspace_bytes";
  if (args.mode != VerifyMode::sampling || args.scratch) return 0;
  SD_CHECK(args.batch >= 0 && args.vocab > 0 && args.batch <= kMaxBytes / args.vocab, who, ": batch = ", args.batch,
           ", vocab = ", args.vocab, " give no valid [B, V] scratch size");
  return section_bytes(args.batch * args.vocab, sizeof(double), who);
}

size_t kv_compact_cuda_workspace_bytes(const CompactArgs& args) {
  return section_bytes(args.batch < 0 ? -1 : 2 * args.batch, sizeof(int32_t), "kv_compact_cuda_workspace_bytes");
}

size_t kv_reorder_cuda_workspace_bytes(int64_t batch) {
  return section_bytes(batch, sizeof(int32_t), "kv_reorder_cuda_workspace_bytes");
}

}  // namespace specdec::kernels
