// Upper bound on the bytes of SequenceState::Serialize() for a sequence of `tokens` tokens,
// from the cache manifest alone: a decode worker reserves this much staging memory before the
// prefill worker computes anything.
#pragma once

#include <cstdint>

#include "engine/cache/cache_layout.h"

namespace pdspark::serving {

int64_t SerializedStateBound(const engine::CacheLayout& layout, int64_t tokens);

}  // namespace pdspark::serving
