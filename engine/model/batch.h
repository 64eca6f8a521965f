// The flattened token layout of one forward step over many sequences: every token of every
// sequence is a row; per-token work (projections, MoE, hyper-connections) runs over all rows
// at once, attention walks each sequence's rows against its own cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/cache/sequence_state.h"

namespace pdspark::engine {

struct BatchSequence {
  SequenceState* state = nullptr;
  int64_t row_begin = 0;  // first row of this sequence in the flat batch
  int64_t count = 0;      // new tokens
  int64_t start_pos = 0;  // position of the first new token
  // kLastTokenPerSequence: logits of every new row, not the last only (StepInput::all_logits).
  bool all_logits = false;
};

struct BatchLayout {
  std::vector<BatchSequence> sequences;
  std::vector<int32_t> token_ids;  // [rows]
  std::vector<int64_t> positions;  // [rows]
  int64_t rows() const { return static_cast<int64_t>(token_ids.size()); }
  // How many rows of `seq` go through the head in `last_per_sequence` mode.
  static int64_t LogitRows(const BatchSequence& seq) {
    return seq.all_logits ? seq.count : std::min<int64_t>(seq.count, 1);
  }
};

}  // namespace pdspark::engine
