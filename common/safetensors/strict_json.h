// Internal to pdspark_safetensors: JSON parsing that is stricter than nlohmann's defaults, for
// untrusted checkpoint headers and index files.
#pragma once

#include <string_view>

#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace pdspark::safetensors::internal {

// Returns the byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and
// code points above U+10FFFF included), or npos when `text` is valid.
size_t FindInvalidUtf8(std::string_view text);

// Parses `text` as JSON, rejecting invalid UTF-8 and duplicate object keys (which nlohmann would
// silently resolve to the last value; two entries for one tensor must not pass). Error messages
// carry no file name: callers prefix it.
StatusOr<nlohmann::json> ParseStrictJson(std::string_view text);

}  // namespace pdspark::safetensors::internal
