// The completion record and checksum a decode worker trusts before admitting a transferred
// state, and the link handshake rule.
#include "common/transport/staged_state.h"

#include <string>
#include <vector>

#include "common/transport/link_check.h"
#include "common/transport/transfer_agent.h"
#include "gtest/gtest.h"

namespace pdspark::transport {
namespace {

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
  return s;
}

TEST(StreamChecksumTest, SplitsDoNotMatterAndEveryByteDoes) {
  const std::string data = Bytes(1003, 1);
  const uint64_t whole = Checksum(data);
  for (size_t a : {0, 1, 3, 4, 5, 16, 17, 500}) {
    for (size_t b : {a, a + 1, a + 7, a + 64, size_t{1003}}) {
      if (b > data.size()) continue;
      StreamChecksum sum;
      sum.Update(data.data(), a);
      sum.Update(data.data() + a, b - a);
      sum.Update(data.data() + b, data.size() - b);
      EXPECT_EQ(sum.Digest(), whole) << a << " " << b;
    }
  }
  for (size_t i : {0, 1, 2, 3, 500, 1002}) {
    std::string flipped = data;
    flipped[i] ^= 0x10;
    EXPECT_NE(Checksum(flipped), whole) << i;
  }
  // Length matters, including zero bytes.
  EXPECT_NE(Checksum(data + std::string(4, '\0')), whole);
  EXPECT_NE(Checksum(std::string(8, '\0')), Checksum(std::string(4, '\0')));
}

CompletionRecord Sample() {
  CompletionRecord record;
  record.nonce = 0x1234abcd5678ef00ull;
  record.link_digest = 42;
  record.num_tokens = 777;
  record.tensor_parallel_size = 2;
  record.prefill_end_unix_ns = 1'700'000'000'000'000'000;
  record.segments = {{0, 777, 11}, {512, 265, 22}, {0, 48, 33}};
  record.drafter_state = Bytes(100, 3);
  return record;
}

TEST(CompletionRecordTest, RoundTripsWithinItsCapacity) {
  const CompletionRecord record = Sample();
  const uint64_t capacity = CompletionRecord::Capacity(3, 100);
  std::string area = record.Serialize();
  ASSERT_EQ(area.size(), capacity);
  auto back = CompletionRecord::Parse(area.data(), capacity, record.nonce);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->link_digest, 42u);
  EXPECT_EQ(back->num_tokens, 777u);
  EXPECT_EQ(back->tensor_parallel_size, 2u);
  EXPECT_EQ(back->prefill_end_unix_ns, record.prefill_end_unix_ns);
  ASSERT_EQ(back->segments.size(), 3u);
  EXPECT_EQ(back->segments[1].first_row, 512u);
  EXPECT_EQ(back->segments[1].rows, 265u);
  EXPECT_EQ(back->segments[2].checksum, 33u);
  EXPECT_EQ(back->drafter_state, record.drafter_state);
}

TEST(CompletionRecordTest, RefusesMissingTornAndForeignRecords) {
  const CompletionRecord record = Sample();
  const std::string good = record.Serialize();
  const uint64_t capacity = good.size();
  // What Reserve leaves behind: a zeroed header.
  std::string empty(capacity, '\0');
  auto st = CompletionRecord::Parse(empty.data(), capacity, record.nonce).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("no completion record"), std::string::npos) << st;
  std::string torn = good;
  torn[kRecordHeaderBytes + 60] ^= 1;
  st = CompletionRecord::Parse(torn.data(), capacity, record.nonce).status();
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  st = CompletionRecord::Parse(good.data(), capacity, record.nonce + 1).status();
  EXPECT_NE(st.message().find("another reservation"), std::string::npos) << st;
  st = CompletionRecord::Parse(good.data(), capacity - 8, record.nonce).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
}

TEST(LinkCheckTest, RefusesMismatchesAndAcceptsAnyTensorParallelPair) {
  const LinkInfo prefill{"fp-a", "cm1-1", 1, 4096};
  for (int64_t tp : {1, 2, 8}) {
    EXPECT_TRUE(CheckLink({"fp-a", "cm1-1", tp, 4096}, {"fp-a", "cm1-1", 8, 4096}).ok()) << tp;
  }
  EXPECT_TRUE(CheckLink(prefill, {"fp-a", "cm1-1", 8, 0}).ok());  // decode does not speculate
  auto refused = [&](const LinkInfo& p, const LinkInfo& d, const char* needle) {
    const Status st = CheckLink(p, d);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << needle;
    EXPECT_EQ(ReasonOf(st), FailureReason::kRefused);
    EXPECT_NE(st.message().find(needle), std::string::npos) << st;
  };
  refused(prefill, {"fp-b", "cm1-1", 1, 4096}, "fingerprint");
  refused(prefill, {"fp-a", "cm1-2", 1, 4096}, "cache manifests differ");
  refused(prefill, {"fp-a", "cm1-1", 0, 4096}, "tensor-parallel");
  refused({"fp-a", "cm1-1", 1, 0}, {"fp-a", "cm1-1", 1, 4096}, "without the drafter");
  refused(prefill, {"fp-a", "cm1-1", 1, 2048}, "ring sizes differ");
  EXPECT_NE(LinkDigest(prefill), LinkDigest({"fp-a", "cm1-2", 1, 4096}));
  EXPECT_EQ(LinkDigest(prefill), LinkDigest({"fp-a", "cm1-1", 8, 0}));  // TP-independent
}

TEST(FailureReasonTest, TravelsWithTheStatus) {
  const Status st = TransferError(FailureReason::kStall, absl::StatusCode::kDeadlineExceeded, "x");
  EXPECT_EQ(ReasonOf(st), FailureReason::kStall);
  EXPECT_EQ(ReasonOf(absl::DeadlineExceededError("y")), FailureReason::kDeadline);
  EXPECT_EQ(ReasonOf(absl::UnavailableError("z")), FailureReason::kPeerFailed);
  EXPECT_EQ(FailureReasonName(FailureReason::kStall), "stall");
}

}  // namespace
}  // namespace pdspark::transport
