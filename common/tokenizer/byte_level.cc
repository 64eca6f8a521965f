#include "common/tokenizer/byte_level.h"

#include <array>

#include "common/tokenizer/utf8.h"

namespace pdspark::tokenizer {
namespace {

bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> symbol_of_byte;
  std::array<int16_t, 512> byte_of_code_point;  // every symbol is below U+0200

  Tables() {
    byte_of_code_point.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = MapsToItself(b) ? static_cast<char32_t>(b) : next_extra++;
      AppendUtf8(cp, &symbol_of_byte[b]);
      byte_of_code_point[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

}  // namespace

std::string_view ByteToSymbol(uint8_t byte) { return GetTables().symbol_of_byte[byte]; }

int SymbolToByte(char32_t code_point) {
  if (code_point >= 512) return -1;
  return GetTables().byte_of_code_point[code_point];
}

std::string BytesToSymbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(ByteToSymbol(static_cast<uint8_t>(c)));
  return out;
}

bool SymbolsToBytes(std::string_view symbols, std::string* out) {
  size_t pos = 0;
  while (pos < symbols.size()) {
    const Utf8Step step = DecodeUtf8(symbols, pos);
    if (!step.valid) return false;
    const int byte = SymbolToByte(step.code_point);
    if (byte < 0) return false;
    out->push_back(static_cast<char>(byte));
    pos += step.length;
  }
  return true;
}

}  // namespace pdspark::tokenizer
