// Test helper: a DSpark checkpoint made of the golden target's shards (symlinked) plus a shard of
// random `mtp.*` tensors of the shapes the config implies, in a fresh temp directory.
#pragma once

#include <cstdint>
#include <string>

namespace pdspark::dspark::testing {

// The golden target (tests/data/golden/dsv4-tiny-a).
std::string GoldenDir();
// Writes the checkpoint and returns its directory. The Markov head's bias is
// markov_scale * w1 . w1[prev], which favours repeating the previous token (drafts are then
// accepted whenever the greedy target repeats itself); 0 leaves broad, unbiased drafts.
std::string WriteRandomDrafterCheckpoint(uint64_t seed, int64_t block_size = 5,
                                         float markov_scale = 0.5f);

}  // namespace pdspark::dspark::testing
