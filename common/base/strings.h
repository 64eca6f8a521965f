// String helpers for Debian's Abseil, which is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW is 0): std::string_view does not convert to it, so
// absl::StrCat rejects std::string_view pieces and fmt cannot print absl::string_view.
#pragma once

#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace pdspark {

// std::string_view -> absl::string_view, for Abseil APIs (StrCat, hash-map lookups).
inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

namespace strings_internal {
template <typename T>
decltype(auto) CatArg(const T& value) {
  if constexpr (std::is_same_v<T, absl::string_view>) {
    return std::string_view(value.data(), value.size());
  } else {
    return (value);
  }
}
}  // namespace strings_internal

// Concatenates any fmt-printable values (std and absl string views included) into a string.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", strings_internal::CatArg(args)), ...);
  return out;
}

}  // namespace pdspark
