// Streaming parsers hold back a delta's tail that could begin a tag the next delta completes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace pdspark::router {

// The length of the longest tail of `text` that is a proper prefix of `tag`.
inline size_t PartialTagAtEnd(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace pdspark::router
