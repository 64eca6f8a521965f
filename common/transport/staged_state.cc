#include "common/transport/staged_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdspark::transport {
namespace {

constexpr uint64_t kPrime = 0x9e3779b97f4a7c15ull;        // odd: multiplying is a bijection
constexpr uint64_t kRecordMagic = 0x3263657264707070ull;  // "ppdprec2"
// Header: magic, body bytes, body checksum, reserved.
constexpr uint64_t kFixedBody = 7;  // nonce, link, tokens, tp, prefill end, segments, drafter

uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

void PutU64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

void StreamChecksum::Word(uint32_t word) {
  uint64_t& lane = lanes_[words_ & 3];
  lane = (lane ^ word) * kPrime;
  ++words_;
}

void StreamChecksum::Update(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  bytes_ += bytes;
  while (carry_bytes_ > 0 && carry_bytes_ < 4 && bytes > 0) {
    carry_ |= static_cast<uint32_t>(*p++) << (8 * carry_bytes_++);
    --bytes;
  }
  if (carry_bytes_ == 4) {
    Word(carry_);
    carry_ = 0;
    carry_bytes_ = 0;
  }
  // Align to lane 0, then four independent lanes per iteration.
  while ((words_ & 3) != 0 && bytes >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    Word(w);
    p += 4;
    bytes -= 4;
  }
  uint64_t a = lanes_[0], b = lanes_[1], c = lanes_[2], d = lanes_[3];
  while (bytes >= 16) {
    uint32_t w[4];
    std::memcpy(w, p, 16);
    a = (a ^ w[0]) * kPrime;
    b = (b ^ w[1]) * kPrime;
    c = (c ^ w[2]) * kPrime;
    d = (d ^ w[3]) * kPrime;
    p += 16;
    bytes -= 16;
    words_ += 4;
  }
  lanes_[0] = a, lanes_[1] = b, lanes_[2] = c, lanes_[3] = d;
  while (bytes >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    Word(w);
    p += 4;
    bytes -= 4;
  }
  while (bytes > 0) {
    carry_ |= static_cast<uint32_t>(*p++) << (8 * carry_bytes_++);
    --bytes;
  }
}

uint64_t StreamChecksum::Digest() const {
  uint64_t h = Mix(bytes_ ^ 0x2545f4914f6cdd1dull);
  for (uint64_t lane : lanes_) h = Mix(h ^ lane) * kPrime;
  return Mix(h ^ carry_ ^ (static_cast<uint64_t>(carry_bytes_) << 32));
}

uint64_t Checksum(std::string_view bytes) {
  StreamChecksum sum;
  sum.Update(bytes.data(), bytes.size());
  return sum.Digest();
}

uint64_t CompletionRecord::Capacity(uint64_t segments, uint64_t drafter_bytes) {
  return kRecordHeaderBytes + 8 * kFixedBody + 24 * segments + drafter_bytes;
}

std::string CompletionRecord::Serialize() const {
  std::string body;
  for (uint64_t v :
       {nonce, link_digest, num_tokens, tensor_parallel_size,
        static_cast<uint64_t>(prefill_end_unix_ns), static_cast<uint64_t>(segments.size()),
        static_cast<uint64_t>(drafter_state.size())}) {
    PutU64(body, v);
  }
  for (const SegmentReport& s : segments) {
    PutU64(body, s.first_row);
    PutU64(body, s.rows);
    PutU64(body, s.checksum);
  }
  body += drafter_state;
  std::string out;
  PutU64(out, kRecordMagic);
  PutU64(out, body.size());
  PutU64(out, Checksum(body));
  PutU64(out, 0);
  return out + body;
}

StatusOr<CompletionRecord> CompletionRecord::Parse(const char* area, uint64_t capacity,
                                                   uint64_t nonce) {
  if (capacity < kRecordHeaderBytes + 8 * kFixedBody) {
    return absl::DataLossError("reservation too small for a completion record");
  }
  if (GetU64(area) != kRecordMagic) {
    return absl::DataLossError(
        "no completion record in the reservation: the prefill worker has not finished "
        "delivering the state");
  }
  const uint64_t body_bytes = GetU64(area + 8);
  if (body_bytes < 8 * kFixedBody || body_bytes > capacity - kRecordHeaderBytes) {
    return absl::DataLossError(absl::StrCat("completion record claims ", body_bytes,
                                            " bytes, the reservation keeps ",
                                            capacity - kRecordHeaderBytes, " for it"));
  }
  const char* body = area + kRecordHeaderBytes;
  if (Checksum(std::string_view(body, body_bytes)) != GetU64(area + 16)) {
    return absl::DataLossError("completion record failed its checksum (torn or partial write)");
  }
  CompletionRecord record;
  record.nonce = GetU64(body);
  if (record.nonce != nonce) {
    return absl::DataLossError("completion record belongs to another reservation (nonce differs)");
  }
  record.link_digest = GetU64(body + 8);
  record.num_tokens = GetU64(body + 16);
  record.tensor_parallel_size = GetU64(body + 24);
  record.prefill_end_unix_ns = static_cast<int64_t>(GetU64(body + 32));
  const uint64_t segments = GetU64(body + 40);
  const uint64_t drafter_bytes = GetU64(body + 48);
  if (segments > body_bytes / 24 || 8 * kFixedBody + 24 * segments + drafter_bytes != body_bytes) {
    return absl::DataLossError("completion record: segment table does not match its size");
  }
  const char* p = body + 8 * kFixedBody;
  for (uint64_t i = 0; i < segments; ++i, p += 24) {
    record.segments.push_back({GetU64(p), GetU64(p + 8), GetU64(p + 16)});
  }
  record.drafter_state.assign(p, drafter_bytes);
  return record;
}

}  // namespace pdspark::transport
