#include "common/tokenizer/byte_level.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace pdspark::tokenizer {
namespace {

TEST(ByteLevelTest, KnownSymbols) {
  EXPECT_EQ(ByteToSymbol('A'), "A");
  EXPECT_EQ(ByteToSymbol('~'), "~");
  EXPECT_EQ(ByteToSymbol(' '), "Ġ");   // U+0120
  EXPECT_EQ(ByteToSymbol('\n'), "Ċ");  // U+010A
  EXPECT_EQ(ByteToSymbol(0x00), "Ā");  // U+0100
  EXPECT_EQ(ByteToSymbol(0x7F), "ġ");  // U+0121: DEL follows the 33 bytes 0x00..0x20
  EXPECT_EQ(ByteToSymbol(0xAD), "Ń");  // U+0143: soft hyphen is the last remapped byte
  EXPECT_EQ(ByteToSymbol(0xE4), "ä");  // printable Latin-1 maps to itself
}

TEST(ByteLevelTest, TableIsABijection) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string symbol(ByteToSymbol(static_cast<uint8_t>(b)));
    EXPECT_TRUE(seen.insert(symbol).second);
    std::string back;
    ASSERT_TRUE(SymbolsToBytes(symbol, &back));
    EXPECT_EQ(back, std::string(1, static_cast<char>(b)));
  }
}

TEST(ByteLevelTest, StringRoundTripAndForeignSymbols) {
  const std::string raw = "héllo 世界\n\x01\xFF";
  std::string back;
  ASSERT_TRUE(SymbolsToBytes(BytesToSymbols(raw), &back));
  EXPECT_EQ(back, raw);
  EXPECT_EQ(BytesToSymbols(" hi"), "Ġhi");
  EXPECT_FALSE(SymbolsToBytes("<｜end▁of▁sentence｜>", &back));  // not byte-level symbols
}

}  // namespace
}  // namespace pdspark::tokenizer
