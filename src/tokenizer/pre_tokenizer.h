#pragma once
// Pre-tokenisation: the text is cut into pieces by a chain of regex splits before BPE runs on
// each piece, as Hugging Face `tokenizers` does (Split / Digits / ByteLevel(use_regex)).
// Regexes run on libpcre2-8 with PCRE2_UTF | PCRE2_UCP (so \p{L}, \s are Unicode-aware),
// JIT-compiled, and with PCRE2_MATCH_INVALID_UTF so invalid UTF-8 input never crashes:
// invalid bytes simply never match and end up in the gaps between matches.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specdec::tokenizer {

// GPT-2's split (HF ByteLevel with use_regex = true).
extern const char* const kGpt2Pattern;
// Llama-3 (tiktoken cl100k style): digits in groups of up to three.
extern const char* const kLlama3Pattern;
// Qwen2 / Qwen2.5: like Llama-3 but every digit on its own.
extern const char* const kQwen2Pattern;

// `pattern` rewritten so PCRE2 agrees with Oniguruma (what HF runs) on \s, \S, \p{L}, \p{N}:
// explicit White_Space set, plus letters/numbers from Unicode versions newer than PCRE2's tables.
// Regex applies it to every non-literal pattern.
std::string onig_compatible(const std::string& pattern);
// HF Digits: every character Rust's char::is_numeric accepts, one at a time or in runs.
std::string digit_pattern(bool individual);

class Regex {
 public:
  // `where` names the source of the pattern (file and key) for error messages.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-empty matches in s as [begin, end) byte offsets, left to right, non-overlapping.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;        // pcre2_code_8* of onig_compatible(pattern)
  void* ascii_code_ = nullptr;  // the pattern as written: same matches on ASCII text, faster JIT
};

// HF SplitDelimiterBehavior: what happens to the matched text.
enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

struct SplitStep {
  std::shared_ptr<const Regex> regex;  // nullptr: no split (ByteLevel with use_regex = false)
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;            // split on the gaps instead of the matches
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to a piece that lacks one
};

class PreTokenizer {
 public:
  void add(SplitStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Cuts text into pieces (appended to `pieces`); concatenated they give the text back, minus
  // removed delimiters and plus prefix spaces.
  void split(std::string_view text, std::vector<std::string>& pieces) const;

  // The chain llama.cpp uses for a tokenizer.ggml.pre value; throws specdec::Error for an
  // unknown value (naming `where`). Sets ignore_merges for Llama-3 style vocabularies.
  static PreTokenizer for_gguf_pre(const std::string& pre, const std::string& where,
                                   bool& ignore_merges);

 private:
  std::vector<SplitStep> steps_;
};

// One split applied to one piece (exposed for tests).
void apply_split(const SplitStep& step, std::string_view piece, std::vector<std::string>& out);

}  // namespace specdec::tokenizer
