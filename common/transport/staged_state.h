// The completion notice of one request's state in a decode worker's reservation. The prefill
// worker streams the state's segments (one per layer and cache group) into fixed places of the
// reservation while it computes; the record comes last, at the start of the reservation, and
// says what was delivered: for every segment its first row, row count and checksum, plus the
// DSpark drafter context. The decode side admits a request only when the record is present,
// intact, meant for this reservation (nonce) and every segment matches its checksum.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::transport {

// A 64-bit checksum over a byte stream fed in pieces of any size; equal streams give equal
// digests however they were split. Four independent multiply lanes over 32-bit words, so it
// runs at several GB/s and adds little to the copy it accompanies.
class StreamChecksum {
 public:
  void Update(const void* data, size_t bytes);
  uint64_t Digest() const;

 private:
  void Word(uint32_t word);
  uint64_t lanes_[4] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull,
                        0x27d4eb2f165667c5ull};
  uint64_t words_ = 0;
  uint64_t bytes_ = 0;
  uint32_t carry_ = 0;  // the bytes of an unfinished word
  int carry_bytes_ = 0;
};

uint64_t Checksum(std::string_view bytes);

struct SegmentReport {
  uint64_t first_row = 0;
  uint64_t rows = 0;
  uint64_t checksum = 0;
};

struct CompletionRecord {
  uint64_t nonce = 0;        // the reservation's nonce, from its transfer descriptor
  uint64_t link_digest = 0;  // the sender's model + cache manifest, see LinkDigest()
  uint64_t num_tokens = 0;
  uint64_t tensor_parallel_size = 1;  // of the prefill worker
  int64_t prefill_end_unix_ns = 0;    // when the prompt's last layer finished
  std::vector<SegmentReport> segments;
  std::string drafter_state;  // DSpark context ring; empty when not shipped

  // Bytes of the serialised record for `segments` segments and a drafter state of
  // `drafter_bytes`: the room a reservation keeps for it.
  static uint64_t Capacity(uint64_t segments, uint64_t drafter_bytes);
  std::string Serialize() const;
  // Reads the record at the start of a reservation (`capacity` bytes). DataLoss names what is
  // wrong: no record yet (incomplete delivery), torn record, record of another reservation.
  static StatusOr<CompletionRecord> Parse(const char* area, uint64_t capacity, uint64_t nonce);
};

// Bytes a reservation zeroes so that a stale record cannot look like a delivery.
inline constexpr uint64_t kRecordHeaderBytes = 32;

}  // namespace pdspark::transport
