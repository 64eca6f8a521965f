// Hashes of token prefixes, the same in every process and build: the engine's prefix cache keys
// its entries by them, and the hash of the first k * block tokens is what names a cached block
// to the router. Each hash extends the one before, so all prefixes of a prompt cost one pass.
//
//   std::vector<uint64_t> h = PrefixHashes(tokens);  // h[p]: the first p tokens
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pdspark {

inline constexpr uint64_t kEmptyPrefixHash = 0x6a09e667f3bcc909ull;

// The hash of a prefix extended by one token (splitmix64's finaliser over the pair).
inline uint64_t ExtendPrefixHash(uint64_t hash, int32_t token) {
  uint64_t x = hash ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// h[p] for p = 0..tokens.size(): the hash of tokens[0, p). Token ids as the engine (int32) or
// the router (uint32) holds them hash alike.
template <typename Token>
std::vector<uint64_t> PrefixHashes(std::span<const Token> tokens) {
  std::vector<uint64_t> hashes(tokens.size() + 1);
  hashes[0] = kEmptyPrefixHash;
  for (size_t i = 0; i < tokens.size(); ++i) {
    hashes[i + 1] = ExtendPrefixHash(hashes[i], static_cast<int32_t>(tokens[i]));
  }
  return hashes;
}
inline std::vector<uint64_t> PrefixHashes(std::span<const int32_t> tokens) {
  return PrefixHashes<int32_t>(tokens);
}

// The hash of all of `tokens` (PrefixHashes(tokens).back(), without the others).
inline uint64_t PrefixHash(std::span<const int32_t> tokens) {
  uint64_t hash = kEmptyPrefixHash;
  for (int32_t token : tokens) hash = ExtendPrefixHash(hash, token);
  return hash;
}

}  // namespace pdspark
