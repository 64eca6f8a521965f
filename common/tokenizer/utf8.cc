#include "common/tokenizer/utf8.h"

#include <cstdint>

namespace pdspark::tokenizer {
namespace {

// Number of continuation bytes and the allowed range of the first one, by lead byte.
struct LeadInfo {
  int continuation_bytes;  // -1: not a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo ClassifyLead(uint8_t b) {
  if (b < 0x80) return {0, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};  // excludes UTF-16 surrogates
  if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};  // caps at U+10FFFF
  return {-1, 0, 0};
}

}  // namespace

Utf8Step DecodeUtf8MultiByte(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const LeadInfo lead = ClassifyLead(b0);
  if (lead.continuation_bytes == 0) return {b0, 1, true, false};
  if (lead.continuation_bytes < 0) return {0, 1, false, false};
  char32_t cp = b0 & (0x3F >> lead.continuation_bytes);
  for (int i = 1; i <= lead.continuation_bytes; ++i) {
    if (pos + i >= text.size()) return {0, i, false, true};
    const auto b = static_cast<uint8_t>(text[pos + i]);
    const uint8_t lo = i == 1 ? lead.second_lo : 0x80;
    const uint8_t hi = i == 1 ? lead.second_hi : 0xBF;
    if (b < lo || b > hi) return {0, i, false, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, lead.continuation_bytes + 1, true, false};
}

std::optional<size_t> FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Step step = DecodeUtf8(text, pos);
    if (!step.valid) return pos;
    pos += step.length;
  }
  return std::nullopt;
}

size_t Utf8CharLength(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const Utf8Step step = DecodeUtf8(text, pos);
  return step.valid ? step.length : 1;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string LossyUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = DecodeUtf8(bytes, pos);
    if (step.valid) {
      out.append(bytes.substr(pos, step.length));
    } else {
      out.append(kReplacementChar);
    }
    pos += step.length;
  }
  return out;
}

size_t StableUtf8Prefix(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = DecodeUtf8(bytes, pos);
    if (step.incomplete) return pos;
    pos += step.length;
  }
  return pos;
}

}  // namespace pdspark::tokenizer
