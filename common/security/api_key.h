// The optional API key of the client API (HTTP `Authorization: Bearer <key>`, gRPC metadata
// `authorization: Bearer <key>`). Compared in constant time so the key cannot be guessed byte
// by byte from response times.
#pragma once

#include <string>
#include <string_view>

namespace pdspark::security {

// The key from the flag, else from $PDSPARK_API_KEY; empty means no key is required.
std::string ResolveApiKey(const std::string& flag_value);

// True when `expected` is empty, or `authorization` is "Bearer <expected>" (the scheme is
// case-insensitive, as in RFC 7235).
bool AuthorizationMatches(std::string_view authorization, std::string_view expected);

bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace pdspark::security
