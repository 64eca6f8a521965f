// GPT-2's reversible byte <-> printable code point table (`bytes_to_unicode`), which byte-level
// BPE vocabularies are written in: printable Latin-1 bytes map to themselves, the other 68 bytes
// (controls, space, DEL, NBSP, soft hyphen) to U+0100 onwards, so "Ġ" (U+0120) is the space.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pdspark::tokenizer {

// UTF-8 of the symbol that stands for `byte`.
std::string_view ByteToSymbol(uint8_t byte);

// The byte a symbol stands for, or -1 when the code point is not in the table.
int SymbolToByte(char32_t code_point);

// Maps every byte of `bytes` to its symbol.
std::string BytesToSymbols(std::string_view bytes);

// Inverts BytesToSymbols. Returns false (leaving `out` unspecified) when `symbols` holds a
// code point outside the table, which is how HF's ByteLevel decoder detects added tokens
// that must be passed through verbatim.
bool SymbolsToBytes(std::string_view symbols, std::string* out);

}  // namespace pdspark::tokenizer
