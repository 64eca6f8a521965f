// Test helper: a DSpark checkpoint made of the golden target's shards (symlinked) plus a shard of
// random `mtp.*` tensors of the shapes the config implies, in a fresh temp directory.
#pragma once

#include <cstdint>
#include <string>

namespace pdspark::dspark::testing {

// The golden target (tests/data/golden/dsv4-tiny-a).
std::string GoldenDir();
// Writes the checkpoint and returns its directory. The Markov head favours repeating the
// previous token, so drafts are accepted whenever the target repeats itself.
std::string WriteRandomDrafterCheckpoint(uint64_t seed, int64_t block_size = 5);

}  // namespace pdspark::dspark::testing
