#pragma once
// Plain token types shared by every module.
#include <cstdint>
#include <vector>

namespace specdec {

using TokenId = int32_t;
using Tokens = std::vector<TokenId>;

}  // namespace specdec
