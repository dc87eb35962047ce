#include "tokenizer/byte_level.h"

#include <array>

namespace specdec::tokenizer {
namespace {

struct Alphabet {
  std::array<std::string, 256> symbol;
  std::array<int, 324> byte_of;  // code points used by the alphabet are all < 324

  Alphabet() {
    byte_of.fill(-1);
    // Printable bytes keep their own code point; the rest are moved to 256, 257, ...
    // in byte order, which is GPT-2's bytes_to_unicode().
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? uint32_t(b) : next++;
      append_utf8(cp, symbol[b]);
      byte_of[cp] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }

// Length of the sequence a lead byte announces and the allowed range of the second byte
// (Unicode table 3-7); 0 for bytes that can never start a sequence.
int lead_info(uint8_t c, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) {
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

const std::string& byte_to_symbol(uint8_t b) { return alphabet().symbol[b]; }

int symbol_to_byte(uint32_t cp) { return cp < 324 ? alphabet().byte_of[cp] : -1; }

std::string bytes_to_symbols(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += byte_to_symbol(c);
  return out;
}

bool symbols_to_bytes(const std::string& symbols, std::string& out) {
  std::string bytes;
  bytes.reserve(symbols.size());
  for (size_t i = 0; i < symbols.size();) {
    uint32_t cp = 0;
    int n = decode_utf8(symbols, i, cp);
    int b = n > 0 ? symbol_to_byte(cp) : -1;
    if (b < 0) return false;
    bytes.push_back(char(b));
    i += size_t(n);
  }
  out += bytes;
  return true;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

int decode_utf8(const std::string& s, size_t i, uint32_t& cp) {
  uint8_t lo, hi;
  uint8_t c = uint8_t(s[i]);
  int n = lead_info(c, lo, hi);
  if (n == 0 || i + size_t(n) > s.size()) return 0;
  if (n == 1) {
    cp = c;
    return 1;
  }
  uint8_t c1 = uint8_t(s[i + 1]);
  if (c1 < lo || c1 > hi) return 0;
  cp = c & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    uint8_t ck = uint8_t(s[i + size_t(k)]);
    if (!is_cont(ck)) return 0;
    cp = (cp << 6) | (ck & 0x3F);
  }
  return n;
}

std::string utf8_lossy(const std::string& bytes) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp;
    int n = decode_utf8(bytes, i, cp);
    if (n > 0) {
      out.append(bytes, i, size_t(n));
      i += size_t(n);
      continue;
    }
    // Skip the maximal subpart: a valid lead byte followed by the continuation bytes that
    // were still acceptable, so truncated sequences cost one U+FFFD, not one per byte.
    uint8_t lo, hi;
    int want = lead_info(uint8_t(bytes[i]), lo, hi);
    size_t j = i + 1;
    if (want > 1 && j < bytes.size()) {
      uint8_t c1 = uint8_t(bytes[j]);
      if (c1 >= lo && c1 <= hi) {
        ++j;
        while (j < bytes.size() && int(j - i) < want && is_cont(uint8_t(bytes[j]))) ++j;
      }
    }
    out += kReplacement;
    i = j;
  }
  return out;
}

bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int n = decode_utf8(s, i, cp);
    if (n == 0) return false;
    i += size_t(n);
  }
  return true;
}

}  // namespace specdec::tokenizer
