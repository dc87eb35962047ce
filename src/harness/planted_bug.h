#pragma once
// The harness's self-check (checks.inject_residual_bug): proof that the distribution checks
// can fail. The checked strategies verify through a backend that wraps the real one and then
// replaces the correction token of every rejected draft with a wrong one:
//   sampling / block:     a sample of p at the rejected position (same uniform) instead of
//                         the residual norm(max(0, p - q)): the classic bug, lossy but subtle;
//   greedy / tokens_only: the rejected draft token itself.
// Everything else (accepted tokens, bonus tokens, KV moves) is the real backend's. Token trees
// are refused: a tree verified correctly would let a "checks must fail" run pass.
// It lives here, in the harness, so no kernel, strategy parameter or public argument carries it.
#include <memory>

#include "kernels/backend.h"

namespace specdec::harness {

std::shared_ptr<kernels::Backend> residual_bug_backend(std::shared_ptr<kernels::Backend> real);

}  // namespace specdec::harness
