#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace specdec::tokenizer {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// HF `tokenizers` runs these patterns on Oniguruma with newer Unicode tables than Debian's
// PCRE2 10.42, and Oniguruma's \s is Unicode White_Space while PCRE2's also takes U+180E.
// The differences below were measured code point by code point (tokenizers 0.23 Split/Digits
// vs this PCRE2) and are patched into every pattern so the pieces agree exactly.
const char* const kWhiteSpace =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
const char* const kExtraLetters =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B})"
    R"(\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02})"
    R"(\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA})"
    R"(\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A})"
    R"(\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
const char* const kExtraNumbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3})"
    R"(\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";
// HF Digits uses Rust's char::is_numeric, newer still than Oniguruma's \p{N}.
const char* const kExtraDigits = R"(\x{11DE0}-\x{11DE9}\x{16FF4}-\x{16FF6})";

// Per-thread match state: pcre2_code is shareable, match data and the JIT stack are not.
// The JIT stack grows to 1 MiB so long whitespace runs ("\s+(?!\S)" backtracks) still match.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string digit_pattern(bool individual) {
  std::string p = "[\\p{N}" + std::string(kExtraDigits) + "]";
  return individual ? p : p + "+";
}

std::string onig_compatible(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      if (c == '[' && !in_class) {
        in_class = true;
        out += c;
        // A ']' right after '[' or '[^' is a literal member, not the end of the class.
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
        if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
        continue;
      }
      if (c == ']' && in_class) in_class = false;
      out += c;
      continue;
    }
    std::string esc = pattern.substr(i, 2);
    if (pattern.compare(i, 5, "\\p{L}") == 0 || pattern.compare(i, 5, "\\p{N}") == 0) {
      std::string members = pattern.substr(i, 5) + (pattern[i + 3] == 'L' ? kExtraLetters : kExtraNumbers);
      out += in_class ? members : "[" + members + "]";
      i += 4;
    } else if (esc == "\\s") {
      out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      i += 1;
    } else if (esc == "\\S" && !in_class) {
      out += "[^" + std::string(kWhiteSpace) + "]";
      i += 1;
    } else {
      out += esc;  // any other escape is copied as is (its second char cannot open a class)
      i += 1;
    }
  }
  return out;
}

namespace {

pcre2_code* compile(const std::string& pattern, bool literal, const std::string& shown,
                    const std::string& where) {
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;  // UCP is meaningless (and refused) for literals
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &err, &err_offset, nullptr);
  SD_CHECK(code != nullptr, where, ": bad pre-tokenizer regex '", shown, "' at offset ",
           err_offset, ": ", pcre2_message(err));
  // JIT is an optimisation only: without it pcre2_match interprets the same pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return code;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : pattern_(pattern) {
  const std::string patched = literal ? pattern : onig_compatible(pattern);
  code_ = compile(patched, literal, pattern, where);
  // The Oniguruma patches only concern code points >= U+0080; on ASCII text the plain
  // pattern matches identically and its JIT code uses PCRE2's fast class tests.
  if (patched != pattern) ascii_code_ = compile(pattern, literal, pattern, where);
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
  pcre2_code_free(static_cast<pcre2_code*>(ascii_code_));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(ascii_code_ && is_ascii(s) ? ascii_code_ : code_);
  MatchScratch& m = scratch();
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos < s.size()) {
    int rc = pcre2_match(code, subject, s.size(), pos, 0, m.data, m.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    SD_CHECK(rc >= 0, "tokenizer: regex '", pattern_, "' failed at byte ", pos, ": ",
             pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
    size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      pos = end;
    } else {
      // An empty match produces no piece (as in HF); step over one character.
      if (begin >= s.size()) break;
      uint32_t cp;
      int n = decode_utf8(std::string(s.substr(begin, 4)), 0, cp);
      pos = begin + size_t(n > 0 ? n : 1);
    }
  }
  return out;
}

void apply_split(const SplitStep& step, std::string_view piece, std::vector<std::string>& out) {
  std::string prefixed;
  if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') {
    prefixed = " " + std::string(piece);
    piece = prefixed;
  }
  if (piece.empty()) return;
  if (!step.regex) {
    out.emplace_back(piece);
    return;
  }
  // Segments covering the piece: (begin, end, is_delimiter).
  struct Segment { size_t begin, end; bool delim; };
  std::vector<Segment> segs;
  size_t at = 0;
  for (auto [b, e] : step.regex->find_all(piece)) {
    if (b > at) segs.push_back({at, b, step.invert});
    segs.push_back({b, e, !step.invert});
    at = e;
  }
  if (at < piece.size()) segs.push_back({at, piece.size(), step.invert});

  // Combine segments into pieces the way HF's SplitDelimiterBehavior folds do: a delimiter is
  // glued to its neighbour only when that neighbour is not itself a delimiter.
  std::vector<std::pair<size_t, size_t>> ranges;
  switch (step.behavior) {
    case SplitBehavior::isolated:
      for (const Segment& s : segs) ranges.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::removed:
      for (const Segment& s : segs)
        if (!s.delim) ranges.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::merged_with_previous:
    case SplitBehavior::contiguous:
      for (size_t k = 0; k < segs.size(); ++k) {
        bool glue = step.behavior == SplitBehavior::contiguous
                        ? k > 0 && segs[k].delim && segs[k - 1].delim
                        : k > 0 && segs[k].delim && !segs[k - 1].delim;
        if (glue) ranges.back().second = segs[k].end;
        else ranges.emplace_back(segs[k].begin, segs[k].end);
      }
      break;
    case SplitBehavior::merged_with_next:
      for (size_t k = segs.size(); k-- > 0;) {
        bool glue = k + 1 < segs.size() && segs[k].delim && !segs[k + 1].delim;
        if (glue) ranges.back().first = segs[k].begin;
        else ranges.emplace_back(segs[k].begin, segs[k].end);
      }
      std::reverse(ranges.begin(), ranges.end());
      break;
  }
  for (auto [b, e] : ranges) out.emplace_back(piece.substr(b, e - b));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string> current{std::string(text)}, next;
  for (const SplitStep& step : steps_) {
    next.clear();
    for (const std::string& p : current) apply_split(step, p, next);
    current.swap(next);
  }
  for (auto& p : current) pieces.push_back(std::move(p));
}

PreTokenizer PreTokenizer::for_gguf_pre(const std::string& pre, const std::string& where,
                                        bool& ignore_merges) {
  auto regex = [&](const char* p) { return std::make_shared<const Regex>(p, false, where); };
  PreTokenizer pt;
  ignore_merges = false;
  if (pre == "gpt2") {
    pt.add({regex(kGpt2Pattern)});
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell") {
    // StarCoder-family vocabularies were trained with every digit isolated first
    // (HF: Sequence[Digits(individual_digits), ByteLevel]).
    pt.add({regex(digit_pattern(true).c_str())});
    pt.add({regex(kGpt2Pattern)});
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez") {
    pt.add({regex(kQwen2Pattern)});
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe" ||
             pre == "falcon3" || pre == "dbrx" || pre == "pixtral") {
    pt.add({regex(kLlama3Pattern)});
    ignore_merges = true;  // Llama-3's tokenizer.json sets ignore_merges
  } else {
    fail(where, ": unsupported tokenizer.ggml.pre '", pre,
         "' (supported: gpt2, smollm, starcoder, refact, codeshell, qwen2, deepseek-r1-qwen, "
         "megrez, llama-bpe, llama3, llama-v3, smaug-bpe, falcon3, dbrx, pixtral)");
  }
  return pt;
}

}  // namespace specdec::tokenizer
