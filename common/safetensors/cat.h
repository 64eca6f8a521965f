// Internal: concatenates values into a message. absl::StrCat cannot be used with std::string_view
// here because Debian's Abseil is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW is 0), so this formats through fmt and converts
// absl::string_view (Status::message()) itself.
#pragma once

#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace pdspark::safetensors::internal {

template <typename T>
decltype(auto) CatArg(const T& value) {
  if constexpr (std::is_same_v<T, absl::string_view>) {
    return std::string_view(value.data(), value.size());
  } else {
    return (value);
  }
}

template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", CatArg(args)), ...);
  return out;
}

}  // namespace pdspark::safetensors::internal
