#include "common/security/api_key.h"

#include <cstdlib>

#include "absl/strings/ascii.h"

namespace pdspark::security {

std::string ResolveApiKey(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* env = std::getenv("PDSPARK_API_KEY");
  return env != nullptr ? std::string(env) : std::string();
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // The length is not secret; the content is compared without an early exit.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

bool AuthorizationMatches(std::string_view authorization, std::string_view expected) {
  if (expected.empty()) return true;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) {
      return false;
    }
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return ConstantTimeEquals(token, expected);
}

}  // namespace pdspark::security
