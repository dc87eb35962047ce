#pragma once
// A request to SmolLM2-135M-Instruct: one user turn through its chat template, stopping at its
// EOS ids or after max_new tokens (the strategies' integration tests share it).
#include <cstdint>
#include <string>

#include "strategies/strategy.h"
#include "tests/support/smollm2.h"
#include "tokenizer/tokenizer.h"

namespace specdec::testing_support {

inline strategies::Request smollm2_chat_request(const std::string& user_text, int64_t max_new, uint64_t seed = 0) {
  const auto& m = smollm2();
  strategies::Request r;
  r.target = m.model;
  r.tokenizer = m.tokenizer;
  r.prompt = m.tokenizer->encode(m.tokenizer->apply_chat_template({{"user", user_text}}, true), true);
  r.stop.eos_ids = m.tokenizer->eos_ids();
  r.stop.max_new_tokens = max_new;
  r.seed = seed;
  return r;
}

}  // namespace specdec::testing_support
