// Worst-case cache bytes of one sequence, per cache group, from the manifest alone. The serving
// engine reserves this much of the KV pool (--kv-cache-memory-bytes) when it admits a request,
// so a running request never outgrows the pool and a full pool makes new requests wait in the
// queue instead of failing.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/cache/cache_layout.h"

namespace pdspark::engine {

// Bytes per group name (summed over layers) a sequence can hold at any moment while it grows to
// `tokens` tokens, fed at most `step_tokens` tokens per forward (a prefill chunk or a verify
// round), in whole pool pages. Groups with a retention window (keep_tokens) hold at most that
// window plus one step, rounded out to whole pages at both ends.
std::map<std::string, int64_t> SequenceBytesBound(const CacheLayout& layout, PageGeometry pages,
                                                  int64_t tokens, int64_t step_tokens);

int64_t TotalBytes(const std::map<std::string, int64_t>& bytes_by_group);

}  // namespace pdspark::engine
