#pragma once
// GPT-2 byte-level alphabet and UTF-8 helpers shared by the BPE tokenizer.
//
// Byte-level BPE spells every byte as one printable Unicode character so that vocabulary
// entries and merges are ordinary strings (byte 0x20 ' ' becomes U+0120 'Ġ', '\n' becomes
// U+010A 'Ċ'); printable Latin-1 bytes map to themselves.
#include <cstdint>
#include <string>

namespace specdec::tokenizer {

// The UTF-8 spelling of byte b in the byte-level alphabet (1 or 2 bytes long).
const std::string& byte_to_symbol(uint8_t b);
// Inverse of byte_to_symbol for one code point; -1 when cp is not in the alphabet.
int symbol_to_byte(uint32_t cp);

// Spells raw bytes in the byte-level alphabet ("a b" -> "aĠb").
std::string bytes_to_symbols(const std::string& bytes);
// Inverse: byte-level spelling -> raw bytes. Returns false (out untouched) when a code point is
// not in the alphabet, e.g. for added tokens written in plain text.
bool symbols_to_bytes(const std::string& symbols, std::string& out);

// Appends the UTF-8 encoding of code point cp.
void append_utf8(uint32_t cp, std::string& out);
// Decodes the code point at s[i]; returns its length in bytes, or 0 for an invalid sequence.
int decode_utf8(const std::string& s, size_t i, uint32_t& cp);
// Replaces every maximal invalid UTF-8 subsequence by U+FFFD, as Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do.
std::string utf8_lossy(const std::string& bytes);
bool is_valid_utf8(const std::string& s);

}  // namespace specdec::tokenizer
