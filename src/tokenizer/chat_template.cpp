// Reading the default system prompt out of a model's Jinja chat template. We render ChatML
// ourselves (no Jinja engine); the one model-specific piece of a ChatML template is the system
// turn it inserts when the conversation has none, and that text sits in a string literal.
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"

namespace specdec::tokenizer {
namespace {

// Parses the Jinja string literal starting at t[i] (a quote); returns its unescaped value and
// moves i past the closing quote (or to the end of an unterminated literal).
std::string read_literal(const std::string& t, size_t& i) {
  const char quote = t[i++];
  std::string value;
  while (i < t.size() && t[i] != quote) {
    char c = t[i++];
    if (c == '\\' && i < t.size()) {
      char e = t[i++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        default: value += e; break;  // \\ \' \" and anything else: the character itself
      }
    } else {
      value += c;
    }
  }
  if (i < t.size()) ++i;
  return value;
}

// All string literals inside {{ ... }} and {% ... %} blocks, in order. Text outside blocks is
// output verbatim by Jinja and may hold unpaired quotes, so it is not scanned.
std::vector<std::string> template_literals(const std::string& t) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i + 1 < t.size()) {
    if (t[i] != '{' || (t[i + 1] != '{' && t[i + 1] != '%')) {
      ++i;
      continue;
    }
    const std::string close = t[i + 1] == '{' ? "}}" : "%}";
    i += 2;
    while (i < t.size() && t.compare(i, 2, close) != 0) {
      if (t[i] == '\'' || t[i] == '"') out.push_back(read_literal(t, i));
      else ++i;
    }
    i += 2;
  }
  return out;
}

}  // namespace

std::string extract_default_system_prompt(const std::string& chat_template) {
  const std::string head = "<|im_start|>system\n", tail = "<|im_end|>";
  for (const std::string& lit : template_literals(chat_template)) {
    if (lit.compare(0, head.size(), head) != 0) continue;
    size_t end = lit.find(tail, head.size());
    if (end == std::string::npos || end == head.size()) continue;
    return lit.substr(head.size(), end - head.size());
  }
  return "";
}

}  // namespace specdec::tokenizer
