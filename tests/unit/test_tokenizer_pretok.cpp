// Pre-tokenisation regexes (PCRE2, Unicode-aware) and the byte-level helpers. Expected pieces
// follow Hugging Face `tokenizers` (Split/ByteLevel with the same patterns).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"

namespace specdec::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

Pieces split_with(const char* pattern, const std::string& text) {
  PreTokenizer pt;
  pt.add({std::make_shared<const Regex>(pattern, false, "test")});
  Pieces out;
  pt.split(text, out);
  return out;
}

Pieces split_gguf(const std::string& pre, const std::string& text) {
  bool ignore_merges = false;
  PreTokenizer pt = PreTokenizer::for_gguf_pre(pre, "test", ignore_merges);
  Pieces out;
  pt.split(text, out);
  return out;
}

TEST(Gpt2Regex, WordsSpacesAndPunctuation) {
  EXPECT_EQ(split_with(kGpt2Pattern, "Hello world!"), (Pieces{"Hello", " world", "!"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "Hello, world"), (Pieces{"Hello", ",", " world"}));
  EXPECT_EQ(split_with(kGpt2Pattern, ""), Pieces{});
}

TEST(Gpt2Regex, WhitespaceRunsLeaveTheLastSpaceToTheNextWord) {
  // \s+(?!\S) takes the run minus its last space, which then prefixes the next word.
  EXPECT_EQ(split_with(kGpt2Pattern, "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "a \n\n b"), (Pieces{"a", " \n\n", " b"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(split_with(kGpt2Pattern, "\tx"), (Pieces{"\t", "x"}));
}

TEST(Gpt2Regex, ContractionsAreCaseSensitive) {
  EXPECT_EQ(split_with(kGpt2Pattern, "I'm don't"), (Pieces{"I", "'m", " don", "'t"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "I'M"), (Pieces{"I", "'", "M"}));
  EXPECT_EQ(split_with(kQwen2Pattern, "I'M"), (Pieces{"I", "'M"}));  // (?i:...) in Qwen2/Llama-3
}

TEST(Gpt2Regex, UnicodeLettersNumbersAndEmoji) {
  EXPECT_EQ(split_with(kGpt2Pattern, "日本語 テキスト"), (Pieces{"日本語", " テキスト"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "Café naïve"), (Pieces{"Café", " naïve"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "مرحبا بالعالم"), (Pieces{"مرحبا", " بالعالم"}));
  // Emoji are neither letters nor numbers: one punctuation-class run, space included.
  EXPECT_EQ(split_with(kGpt2Pattern, "a 😀👍🏽 b"), (Pieces{"a", " 😀👍🏽", " b"}));
  // A combining mark (\p{M}) is not \p{L}: "e" + U+0301 splits.
  EXPECT_EQ(split_with(kGpt2Pattern, "e\u0301t"), (Pieces{"e", "\u0301", "t"}));
  // U+00A0 is Unicode whitespace (PCRE2_UCP) but not the optional ASCII space before a word.
  EXPECT_EQ(split_with(kGpt2Pattern, "a\u00a0\u00a0b"), (Pieces{"a", "\u00a0", "\u00a0", "b"}));
}

TEST(DigitRules, DifferPerModelFamily) {
  EXPECT_EQ(split_with(kGpt2Pattern, "x 12345"), (Pieces{"x", " 12345"}));
  EXPECT_EQ(split_with(kLlama3Pattern, "12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(split_with(kQwen2Pattern, "123"), (Pieces{"1", "2", "3"}));
  // SmolLM2: every digit isolated first, then GPT-2 on the rest, so "a  1" keeps "  " whole.
  EXPECT_EQ(split_gguf("smollm", "a  1"), (Pieces{"a", "  ", "1"}));
  EXPECT_EQ(split_gguf("gpt2", "a  1"), (Pieces{"a", " ", " 1"}));
}

// Expected pieces printed by tokenizers 0.23 Split(Regex(<Llama-3 pattern>), "isolated").
TEST(Llama3Regex, MatchesHF) {
  EXPECT_EQ(split_with(kLlama3Pattern, "I'VE 1234567 \n\n  x"),
            (Pieces{"I", "'VE", " ", "123", "456", "7", " \n\n", " ", " x"}));
  EXPECT_EQ(split_with(kLlama3Pattern, "   hello\r\n\r\n"), (Pieces{"  ", " hello", "\r\n\r\n"}));
  EXPECT_EQ(split_with(kLlama3Pattern, "don't.  Yes!!!\n"), (Pieces{"don", "'t", ".", " ", " Yes", "!!!\n"}));
  EXPECT_EQ(split_with(kLlama3Pattern, "$x=12;"), (Pieces{"$x", "=", "12", ";"}));
  bool ignore_merges = false;
  PreTokenizer::for_gguf_pre("llama-bpe", "test", ignore_merges);
  EXPECT_TRUE(ignore_merges);
}

TEST(Qwen2Regex, NewlinesAndPunctuation) {
  EXPECT_EQ(split_with(kQwen2Pattern, "a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(split_with(kQwen2Pattern, "f(x);\n  y"), (Pieces{"f", "(x", ");\n", " ", " y"}));
  EXPECT_EQ(split_with(kQwen2Pattern, "  \n\tz"), (Pieces{"  \n", "\tz"}));
}

// HF runs these patterns on Oniguruma; PCRE2 is patched to agree (see onig_compatible).
// Expected pieces printed by tokenizers 0.23 (Split with the same pattern / Digits).
TEST(OnigCompat, WhitespaceLettersAndDigitsAgreeWithHF) {
  // U+180E (Mongolian vowel separator) is not White_Space since Unicode 6.3: it is
  // punctuation-like and glues to a following apostrophe, as in HF.
  EXPECT_EQ(split_with(kGpt2Pattern, "\u180e's"), (Pieces{"\u180e'", "s"}));
  EXPECT_EQ(split_with(kGpt2Pattern, "a\u2028\u0085b"), (Pieces{"a", "\u2028", "\u0085", "b"}));
  // U+1E5F1 (Ol Onal digit, Unicode 16) is \p{N}; U+10D4A (Garay letter) is \p{L}.
  EXPECT_EQ(split_with(kQwen2Pattern, "\U0001e5f1\U0001e5f1"), (Pieces{"\U0001e5f1", "\U0001e5f1"}));
  EXPECT_EQ(split_with(kGpt2Pattern, " \U00010d4a\U00010d4a"), (Pieces{" \U00010d4a\U00010d4a"}));
  // HF Digits (Rust is_numeric) also isolates U+16FF4.
  EXPECT_EQ(split_gguf("smollm", "x\U00016ff4y"), (Pieces{"x", "\U00016ff4", "y"}));
  // Rewriting keeps classes intact: \s inside [...] expands without nesting brackets.
  std::string r = onig_compatible(R"([^\s\p{L}]+|\S)");
  EXPECT_EQ(r.find("[^[") , std::string::npos);
  EXPECT_EQ(r.rfind("[^\\x{9}", 0), 0u);
}

TEST(InvalidUtf8, IsKeptInGapPiecesWithoutCrashing) {
  Pieces p = split_with(kGpt2Pattern, "ab\xFF" "cd \xC3 e");
  std::string joined;
  for (auto& s : p) joined += s;
  EXPECT_EQ(joined, "ab\xFF" "cd \xC3 e");
  EXPECT_EQ(p.front(), "ab");
  EXPECT_NE(std::find(p.begin(), p.end(), "\xFF"), p.end());
}

// Expected values printed by tokenizers 0.23 pre_tokenizers.Split("-", behavior=...).
TEST(SplitBehaviors, MatchHfSemantics) {
  auto re = std::make_shared<const Regex>("-", true, "test");
  auto run = [&](SplitBehavior b, bool invert = false) {
    Pieces out;
    apply_split({re, b, invert}, "a-b--c", out);
    return out;
  };
  EXPECT_EQ(run(SplitBehavior::isolated), (Pieces{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(run(SplitBehavior::removed), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(run(SplitBehavior::merged_with_previous), (Pieces{"a-", "b-", "-", "c"}));
  EXPECT_EQ(run(SplitBehavior::merged_with_next), (Pieces{"a", "-b", "-", "-c"}));
  EXPECT_EQ(run(SplitBehavior::contiguous), (Pieces{"a", "-", "b", "--", "c"}));
}

TEST(RegexErrors, BadPatternNamesItsSource) {
  try {
    Regex r("(unclosed", false, "tok.json: pre_tokenizer.pattern");
    FAIL() << "expected specdec::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tok.json: pre_tokenizer.pattern"), std::string::npos);
  }
  bool ignore = false;
  EXPECT_THROW(PreTokenizer::for_gguf_pre("no-such-pre", "m.gguf", ignore), Error);
}

TEST(ByteLevel, AlphabetIsGpt2s) {
  EXPECT_EQ(byte_to_symbol(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_symbol('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_symbol('a'), "a");
  for (int b = 0; b < 256; ++b) {
    std::string back;
    ASSERT_TRUE(symbols_to_bytes(byte_to_symbol(uint8_t(b)), back));
    ASSERT_EQ(back, std::string(1, char(b)));
  }
  std::string out;
  EXPECT_FALSE(symbols_to_bytes("\xE2\x82\xAC", out));  // U+20AC is not in the alphabet
}

TEST(ByteLevel, LossyUtf8MatchesPythonReplace) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(utf8_lossy("\xC3"), r);                    // truncated 2-byte sequence
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);                // maximal subpart: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8_lossy("\xF0\x80"), r + r);            // 0x80 cannot follow 0xF0
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);    // surrogate
  EXPECT_EQ(utf8_lossy("\xFF" "a\xC0\xAF"), r + "a" + r + r);
  EXPECT_TRUE(is_valid_utf8("日本 😀"));
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));
}

}  // namespace
}  // namespace specdec::tokenizer
