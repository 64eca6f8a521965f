// Strict UTF-8 decoding helpers shared by the encoder (input validation), the decoder (lossy
// conversion of token bytes) and the streaming detokenizer (holding back partial characters).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace pdspark::tokenizer {

// One decoding step at a byte offset.
struct Utf8Step {
  char32_t code_point = 0;  // valid only when `valid`
  int length = 0;           // bytes consumed: the character, or the maximal ill-formed subpart
  bool valid = false;
  // The bytes are a proper prefix of a well-formed character cut short by the end of input.
  bool incomplete = false;
};

// Multi-byte path of DecodeUtf8.
Utf8Step DecodeUtf8MultiByte(std::string_view text, size_t pos);

// Decodes the character at `pos` (< text.size()) per Unicode Table 3-7 (no overlongs,
// surrogates or code points above U+10FFFF). Invalid input consumes its "maximal subpart"
// (Unicode's recommended practice, also what Rust's from_utf8_lossy does). Inline because the
// regex scanners call it per character and most text is ASCII.
inline Utf8Step DecodeUtf8(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) return {b0, 1, true, false};
  return DecodeUtf8MultiByte(text, pos);
}

// Offset of the first byte that does not start a well-formed character, or nullopt.
std::optional<size_t> FindInvalidUtf8(std::string_view text);

// Byte length of the character starting at `pos`, 1 for an invalid byte; 0 at the end.
size_t Utf8CharLength(std::string_view text, size_t pos);

void AppendUtf8(char32_t code_point, std::string* out);

// Replaces every maximal ill-formed subpart with U+FFFD, keeping well-formed text as is.
std::string LossyUtf8(std::string_view bytes);

// Length of the longest prefix whose lossy conversion cannot change when more bytes are
// appended: everything except a trailing incomplete (but so far well-formed) character.
size_t StableUtf8Prefix(std::string_view bytes);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace pdspark::tokenizer
