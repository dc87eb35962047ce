// Byte-level BPE on tiny hand-written tokenizer.json vocabularies: merge order, byte-level
// spelling, added/special tokens, decoding with byte fallback, chat template, bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace specdec::tokenizer {
namespace {

// Writes `json` to a file in the test temp dir and returns its path.
std::string write_json(const std::string& name, const std::string& json) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << json;
  return path;
}

// A tokenizer.json with the given vocab/merges/added tokens and GPT-2 ByteLevel splitting.
std::string make_json(const std::string& vocab, const std::string& merges,
                      const std::string& added = "[]", const std::string& post = "null") {
  return R"({"version": "1.0", "added_tokens": )" + added +
         R"(, "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": )" + post + R"(,
  "model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": )" + merges + "}}";
}

std::shared_ptr<Tokenizer> make(const std::string& name, const std::string& json) {
  return Tokenizer::from_hf_json(write_json(name, json));
}

const char* kAbcVocab = R"({"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "Ġ": 6, "Ġa": 7})";

TEST(BpeMerges, LowerRankMergesFirst) {
  auto bc_first = make("bc.json", make_json(kAbcVocab, R"([["b", "c"], ["a", "b"]])"));
  auto ab_first = make("ab.json", make_json(kAbcVocab, R"([["a", "b"], ["b", "c"]])"));
  EXPECT_EQ(bc_first->encode("abc"), (Tokens{0, 4}));  // a + bc
  EXPECT_EQ(ab_first->encode("abc"), (Tokens{3, 2}));  // ab + c
  auto full = make("full.json", make_json(kAbcVocab, R"(["b c", "a bc"])"));  // string form
  EXPECT_EQ(full->encode("abc"), Tokens{5});
}

TEST(BpeMerges, EqualRanksMergeLeftmostFirst) {
  auto tok = make("aa.json", make_json(R"({"a": 0, "aa": 1})", R"([["a", "a"]])"));
  EXPECT_EQ(tok->encode("aaa"), (Tokens{1, 0}));
  EXPECT_EQ(tok->encode("aaaa"), (Tokens{1, 1}));
  EXPECT_EQ(tok->encode("aaaaa"), (Tokens{1, 1, 0}));
}

TEST(BpeMerges, LongPieceUsesAllMerges) {
  auto tok = make("aa2.json", make_json(R"({"a": 0, "aa": 1, "aaaa": 2})", R"([["a", "a"], ["aa", "aa"]])"));
  Tokens ids = tok->encode(std::string(4000, 'a'));
  EXPECT_EQ(ids, Tokens(1000, 2));
}

TEST(BpeMerges, SpacesAreSpelledByteLevel) {
  auto tok = make("sp.json", make_json(kAbcVocab, R"([["Ġ", "a"], ["a", "b"]])"));
  // "ab a" pre-tokenises to "ab", " a"; the space is the byte-level symbol "Ġ".
  EXPECT_EQ(tok->encode("ab a"), (Tokens{3, 7}));
  EXPECT_EQ(tok->token_string(7), "Ġa");
  EXPECT_EQ(tok->token_bytes(7), " a");
  EXPECT_EQ(tok->decode({3, 7}), "ab a");
  // Bytes missing from the vocabulary are dropped, as HF BPE without unk_token does.
  EXPECT_EQ(tok->encode("a?b"), (Tokens{0, 1}));
}

TEST(BpeMerges, IgnoreMergesTakesWholeVocabularyPieces) {
  // Llama-3 style: a pre-token that is itself in the vocabulary is one token, even when the
  // merges alone would not build it.
  std::string json = make_json(kAbcVocab, R"([["a", "b"]])");
  auto plain = make("im0.json", json);
  json.replace(json.find(R"("type": "BPE")"), 13, R"("type": "BPE", "ignore_merges": true)");
  auto ignoring = make("im1.json", json);
  EXPECT_EQ(plain->encode("abc"), (Tokens{3, 2}));
  EXPECT_EQ(ignoring->encode("abc"), Tokens{5});
  EXPECT_EQ(ignoring->encode("abca"), (Tokens{3, 2, 0}));  // "abca" is not in the vocabulary
}

TEST(AddedTokens, AreMatchedLiterallyLongestFirst) {
  const std::string added = R"([
    {"id": 8, "content": "<|x|>", "special": true},
    {"id": 9, "content": "<|x|>y", "special": false},
    {"id": 10, "content": "<s>", "special": true, "rstrip": true},
    {"id": 11, "content": "</s>", "special": true, "lstrip": true}])";
  auto tok = make("added.json", make_json(kAbcVocab, R"([["a", "b"]])", added));
  EXPECT_EQ(tok->encode("ab<|x|>a"), (Tokens{3, 8, 0}));
  EXPECT_EQ(tok->encode("<|x|>yab"), (Tokens{9, 3}));   // longest added token wins
  EXPECT_EQ(tok->encode("<|x|"), Tokens{});             // '<', '|' are not in this vocabulary
  EXPECT_EQ(tok->encode("<s> a"), (Tokens{10, 0}));      // rstrip swallows the space
  EXPECT_EQ(tok->encode("a </s>"), (Tokens{0, 11}));     // lstrip swallows the space
  EXPECT_TRUE(tok->is_special(8));
  EXPECT_FALSE(tok->is_special(9));
  EXPECT_FALSE(tok->is_special(3));
  EXPECT_EQ(tok->decode({0, 8, 9, 1}), "a<|x|><|x|>yb");
  EXPECT_EQ(tok->decode({0, 8, 9, 1}, /*skip_special=*/true), "a<|x|>yb");
  EXPECT_EQ(tok->vocab_size(), 12);
}

TEST(Decode, IncompleteUtf8BecomesReplacementCharacter) {
  // "Ã" (U+00C3) spells byte 0xC3 and "©" (U+00A9) byte 0xA9: together "é" (C3 A9).
  auto tok = make("utf.json", make_json(R"({"Ã": 0, "©": 1, "Ã©": 2})", "[]"));
  EXPECT_EQ(tok->token_bytes(0), "\xC3");
  EXPECT_EQ(tok->decode({0}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode({0, 1}), "\xC3\xA9");
  EXPECT_EQ(tok->decode({1, 0}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok->encode("\xC3\xA9"), (Tokens{0, 1}));  // no merge listed
  EXPECT_THROW(tok->token_bytes(3), Error);
  EXPECT_THROW(tok->decode({-1}), Error);
}

TEST(PostProcessor, TemplateProcessingAddsBos) {
  const std::string added = R"([{"id": 8, "content": "<bos>", "special": true}])";
  const std::string post = R"({"type": "Sequence", "processors": [{"type": "ByteLevel"},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
     {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {}}]})";
  auto tok = make("bos.json", make_json(kAbcVocab, "[]", added, post));
  EXPECT_EQ(tok->bos_id(), 8);
  EXPECT_EQ(tok->encode("a"), (Tokens{8, 0}));
  EXPECT_EQ(tok->encode("a", /*add_special=*/false), Tokens{0});
}

TEST(PreTokenizerJson, SequenceOfDigitsAndSplit) {
  std::string json = make_json(R"({"1": 0, "2": 1, "12": 2, "Ġ": 3, "a": 4})", R"([["1", "2"]])");
  auto digits = json.replace(json.find(R"({"type": "ByteLevel")"), std::string(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})").size(),
      R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
         {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]})");
  auto tok = make("digits.json", digits);
  EXPECT_EQ(tok->encode("12"), (Tokens{0, 1}));  // digits isolated before BPE: no "12"
  auto plain = make("plain.json", make_json(R"({"1": 0, "2": 1, "12": 2})", R"([["1", "2"]])"));
  EXPECT_EQ(plain->encode("12"), Tokens{2});
}

TEST(ChatTemplate, ExtractsDefaultSystemPromptFromJinja) {
  const std::string smol =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are SmolLM.<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}";
  EXPECT_EQ(extract_default_system_prompt(smol), "You are SmolLM.");
  // Qwen style: escaped newlines, and the content-carrying literal comes first.
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, it\\'s me.<|im_end|>\\n' }}"
      "{%- endif %}";
  EXPECT_EQ(extract_default_system_prompt(qwen), "You are Qwen, it's me.");
  EXPECT_EQ(extract_default_system_prompt("{{ '<|im_start|>' + m['role'] }} don't"), "");
}

TEST(ChatTemplate, RendersChatMLWithDefaultSystemTurn) {
  std::string json = make_json(kAbcVocab, "[]");
  std::string dir = ::testing::TempDir() + "chat";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << json;
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"chat_template": "{{ '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}"})";
  auto tok = Tokenizer::from_hf_json(dir + "/tokenizer.json");
  EXPECT_EQ(tok->apply_chat_template({{"user", "hi"}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tok->apply_chat_template({{"system", "S"}, {"user", "hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
}

// Every malformed file gives specdec::Error naming the file and the key at fault.
void expect_error(const std::string& name, const std::string& json, const std::string& key) {
  std::string path = write_json(name, json);
  try {
    Tokenizer::from_hf_json(path);
    ADD_FAILURE() << name << ": expected specdec::Error mentioning " << key;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(key), std::string::npos) << msg;
  }
}

TEST(MalformedJson, ErrorsNameFileAndKey) {
  expect_error("bad1.json", "{ not json", "invalid JSON");
  expect_error("bad2.json", R"({"model": {"type": "BPE", "merges": []}, "pre_tokenizer": null})", "model.vocab");
  expect_error("bad3.json", make_json(R"({"a": "zero"})", "[]"), "model.vocab['a']");
  expect_error("bad4.json", make_json(kAbcVocab, R"([["a", "q"]])"), "model.merges[0] (merge 0 'a q')");
  expect_error("bad5.json", make_json(kAbcVocab, R"([["a"]])"), "model.merges[0]");
  expect_error("bad6.json", make_json(kAbcVocab, R"(["ab"])"), "model.merges[0]");
  expect_error("bad7.json", make_json(kAbcVocab, "[]", R"([{"id": 9}])"), "added_tokens[0].content");
  std::string wp = make_json(kAbcVocab, "[]");
  wp.replace(wp.find("\"BPE\""), 5, "\"WordPiece\"");
  expect_error("bad8.json", wp, "model.type");
  std::string meta = make_json(kAbcVocab, "[]");
  meta.replace(meta.find("\"ByteLevel\""), 11, "\"Metaspace\"");
  expect_error("bad9.json", meta, "pre_tokenizer.type");
  EXPECT_THROW(Tokenizer::from_hf_json("/nonexistent/tokenizer.json"), Error);
}

TEST(Encode, IsThreadSafe) {
  // encode() is const and shared between strategies: the piece cache is locked and the regex
  // match state is per thread.
  auto tok = make("mt.json", make_json(kAbcVocab, R"([["a", "b"], ["b", "c"], ["ab", "c"], ["Ġ", "a"]])"));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += (i % 3 ? " abc" : " ab ca");
  const Tokens expected = tok->encode(text);
  std::vector<Tokens> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { for (int r = 0; r < 5; ++r) got[t] = tok->encode(text); });
  for (auto& th : threads) th.join();
  for (const Tokens& g : got) EXPECT_EQ(g, expected);
}

TEST(Encode, IsDeterministicAcrossCacheHits) {
  auto tok = make("det.json", make_json(kAbcVocab, R"([["a", "b"], ["b", "c"], ["ab", "c"]])"));
  Tokens first = tok->encode("abc abc ab a");
  EXPECT_EQ(first, tok->encode("abc abc ab a"));
  EXPECT_EQ(first, (Tokens{5, 6, 5, 6, 3, 6, 0}));  // no "Ġ a" merge listed
}

}  // namespace
}  // namespace specdec::tokenizer
