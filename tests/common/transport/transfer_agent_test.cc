// Real transfers: in-process memcpy, UCX between two agents of one process, and UCX between two
// processes over tcp and shared memory, including a peer that dies mid-link.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/in_process_agent.h"
#include "common/transport/ucx_agent.h"
#include "gtest/gtest.h"

namespace pdspark::transport {
namespace {

Clock::time_point In(std::chrono::milliseconds ms) { return Clock::now() + ms; }

std::vector<char> Pattern(size_t n, int seed) {
  std::vector<char> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return data;
}

// Writes two non-contiguous pieces of `source` into `sink`'s region and checks the bytes.
void ExpectScatteredWrite(TransferAgent& source, TransferAgent& sink) {
  std::vector<char> target(1 << 20, 0);
  auto region = sink.RegisterMemory(target.data(), target.size(), MemoryKind::kHost);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_TRUE(source.Connect("sink", sink.LocalAddress()).ok());
  const auto a = Pattern(4096, 1), b = Pattern(300000, 2);
  auto descriptor = RemoteRegion::Deserialize(region->remote.Serialize());
  ASSERT_TRUE(descriptor.ok());
  Status st =
      source.Write("sink", *descriptor, {{a.data(), a.size(), 0}, {b.data(), b.size(), 700000}},
                   In(std::chrono::seconds(10)));
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(0, std::memcmp(target.data(), a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(target.data() + 700000, b.data(), b.size()));
  EXPECT_EQ(0, target[a.size()]);  // nothing written between the pieces
  // Writes past the end of the region are refused before anything is posted.
  st = source.Write("sink", *descriptor, {{a.data(), a.size(), target.size() - 10}},
                    In(std::chrono::seconds(1)));
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_TRUE(sink.DeregisterMemory(region->id).ok());
}

TEST(RemoteRegionTest, RoundTripsAndRejectsCorruptBytes) {
  RemoteRegion region{0x1234, 4096, std::string("key\0bytes", 9)};
  auto back = RemoteRegion::Deserialize(region.Serialize());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->base, region.base);
  EXPECT_EQ(back->size, region.size);
  EXPECT_EQ(back->packed_key, region.packed_key);
  std::string bytes = region.Serialize();
  EXPECT_FALSE(RemoteRegion::Deserialize(bytes.substr(0, 10)).ok());
  EXPECT_FALSE(RemoteRegion::Deserialize(bytes + "x").ok());
  bytes[0] ^= 1;
  EXPECT_FALSE(RemoteRegion::Deserialize(bytes).ok());
}

TEST(InProcessAgentTest, WritesIntoPeerRegion) {
  InProcessAgent source, sink;
  ExpectScatteredWrite(source, sink);
}

TEST(InProcessAgentTest, RefusesUnknownPeerAndUnregisteredRegion) {
  InProcessAgent source, sink;
  std::vector<char> buffer(64);
  RemoteRegion bogus{reinterpret_cast<uint64_t>(buffer.data()), buffer.size(), "nope"};
  EXPECT_EQ(
      source.Write("sink", bogus, {{buffer.data(), 8, 0}}, In(std::chrono::seconds(1))).code(),
      absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(source.Connect("sink", sink.LocalAddress()).ok());
  EXPECT_EQ(
      source.Write("sink", bogus, {{buffer.data(), 8, 0}}, In(std::chrono::seconds(1))).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(source.Connect("x", "inprocess:does-not-exist").ok());
}

class UcxAgentTest : public ::testing::TestWithParam<std::string> {};

TEST_P(UcxAgentTest, WritesBetweenTwoAgentsOfOneProcess) {
  auto source = UcxAgent::Create({GetParam(), ""});
  auto sink = UcxAgent::Create({GetParam(), ""});
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_EQ((*source)->TransportName(), "ucx:" + GetParam());
  ExpectScatteredWrite(**source, **sink);
}

// Child process: registers a buffer, sends address + descriptor through a pipe, waits for the
// parent's "written" byte, then exits 0 only if the buffer holds the expected pattern.
[[noreturn]] void RunSinkChild(const std::string& transports, int to_parent, int from_parent,
                               size_t size) {
  auto agent = UcxAgent::Create({transports, ""});
  if (!agent.ok()) _exit(10);
  std::vector<char> buffer(size, 0);
  auto region = (*agent)->RegisterMemory(buffer.data(), buffer.size(), MemoryKind::kHost);
  if (!region.ok()) _exit(11);
  const std::string address = (*agent)->LocalAddress();
  const std::string descriptor = region->remote.Serialize();
  for (const std::string* blob : {&address, &descriptor}) {
    const uint64_t n = blob->size();
    if (write(to_parent, &n, sizeof(n)) != sizeof(n)) _exit(12);
    if (write(to_parent, blob->data(), n) != static_cast<ssize_t>(n)) _exit(12);
  }
  char done = 0;
  if (read(from_parent, &done, 1) != 1) _exit(13);
  _exit(buffer == Pattern(size, 9) ? 0 : 14);
}

std::string ReadBlob(int fd) {
  uint64_t n = 0;
  if (read(fd, &n, sizeof(n)) != sizeof(n)) return {};
  std::string blob(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, blob.data() + got, n - got);
    if (r <= 0) return {};
    got += r;
  }
  return blob;
}

struct SinkProcess {
  pid_t pid = -1;
  int to_child = -1;
  std::string address;
  RemoteRegion region;
};

SinkProcess StartSink(const std::string& transports, size_t size) {
  int up[2], down[2];
  EXPECT_EQ(pipe(up), 0);
  EXPECT_EQ(pipe(down), 0);
  SinkProcess sink;
  sink.pid = fork();
  if (sink.pid == 0) {
    close(up[0]);
    close(down[1]);
    RunSinkChild(transports, up[1], down[0], size);
  }
  close(up[1]);
  close(down[0]);
  sink.to_child = down[1];
  sink.address = ReadBlob(up[0]);
  auto region = RemoteRegion::Deserialize(ReadBlob(up[0]));
  close(up[0]);
  EXPECT_TRUE(region.ok());
  if (region.ok()) sink.region = *region;
  return sink;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST_P(UcxAgentTest, WritesIntoAnotherProcess) {
  const size_t size = 8 << 20;
  SinkProcess sink = StartSink(GetParam(), size);
  ASSERT_FALSE(sink.address.empty());
  auto source = UcxAgent::Create({GetParam(), ""});
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE((*source)->Connect("sink", sink.address).ok());
  const auto data = Pattern(size, 9);
  // Layer-by-layer style: many puts of one chunk each, then one remote completion.
  std::vector<WriteOp> ops;
  for (size_t off = 0; off < size; off += 1 << 18) ops.push_back({data.data() + off, 1 << 18, off});
  Status st = (*source)->Write("sink", sink.region, ops, In(std::chrono::seconds(20)));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(write(sink.to_child, "x", 1), 1);
  EXPECT_EQ(WaitExit(sink.pid), 0);
  close(sink.to_child);
}

TEST_P(UcxAgentTest, DeadPeerFailsByTheDeadlineInsteadOfHanging) {
  const size_t size = 1 << 20;
  SinkProcess sink = StartSink(GetParam(), size);
  ASSERT_FALSE(sink.address.empty());
  auto source = UcxAgent::Create({GetParam(), ""});
  ASSERT_TRUE(source.ok());
  ASSERT_TRUE((*source)->Connect("sink", sink.address).ok());
  kill(sink.pid, SIGKILL);
  WaitExit(sink.pid);
  close(sink.to_child);
  const auto data = Pattern(size, 9);
  const auto start = Clock::now();
  // The first writes may still land in the dead process's socket buffers; keep writing until
  // UCX notices. Every call must return by its deadline.
  Status st;
  for (int i = 0; i < 20 && st.ok(); ++i) {
    st = (*source)->Write("sink", sink.region, {{data.data(), size, 0}},
                          In(std::chrono::seconds(2)));
  }
  // tcp detects the dead peer; shared memory may keep accepting writes into the orphaned
  // segment (UCX has no peer-failure detection there), but no call may hang.
  if (GetParam() == "tcp") EXPECT_FALSE(st.ok());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(45));
}

// A tcp sink process that is stopped (alive, but its worker never progresses: tcp RMA needs
// the target's progress, so no flush can complete), and an agent connected to it.
struct StoppedSink {
  explicit StoppedSink(size_t size) : sink(StartSink("tcp", size)) {
    EXPECT_FALSE(sink.address.empty());
    source = UcxAgent::Create({"tcp", ""}).value();
    EXPECT_TRUE(source->Connect("sink", sink.address).ok());
    kill(sink.pid, SIGSTOP);
  }
  ~StoppedSink() {
    kill(sink.pid, SIGKILL);
    WaitExit(sink.pid);
    close(sink.to_child);
  }
  SinkProcess sink;
  std::unique_ptr<UcxAgent> source;
};

TEST(UcxStallTest, StalledPeerFailsWithDeadlineExceeded) {
  // A stopped peer must not hold the writer past the deadline.
  const size_t size = 64 << 20;
  StoppedSink stopped(size);
  const auto data = Pattern(size, 9);
  const auto start = Clock::now();
  Status st = stopped.source->Write("sink", stopped.sink.region, {{data.data(), size, 0}},
                                    In(std::chrono::milliseconds(1500)));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  // The endpoint was closed: the next write needs a new Connect.
  EXPECT_FALSE(
      stopped.source
          ->Write("sink", stopped.sink.region, {{data.data(), 8, 0}}, In(std::chrono::seconds(1)))
          .ok());
}

TEST_P(UcxAgentTest, PostedWritesAndFlushCompleteIntoTheirTracker) {
  auto source = UcxAgent::Create({GetParam(), ""});
  auto sink = UcxAgent::Create({GetParam(), ""});
  ASSERT_TRUE(source.ok() && sink.ok());
  std::vector<char> target(1 << 20, 0);
  auto region = (*sink)->RegisterMemory(target.data(), target.size(), MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  ASSERT_TRUE((*source)->Connect("sink", (*sink)->LocalAddress()).ok());
  const auto data = Pattern(3 << 18, 5);
  std::vector<WriteOp> ops;
  for (size_t i = 0; i < 3; ++i) ops.push_back({data.data() + (i << 18), 1 << 18, i << 18});
  TransferTracker tracker;
  ASSERT_TRUE((*source)->PostWrites("sink", region->remote, ops, tracker).ok());
  ASSERT_TRUE((*source)->PostFlush("sink", tracker).ok());
  Status st = AwaitCompletion(**source, "sink", tracker, In(std::chrono::seconds(10)),
                              std::chrono::seconds(5));
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(tracker.completed(), 4);
  EXPECT_EQ(tracker.pending(), 0);
  EXPECT_EQ(0, std::memcmp(target.data(), data.data(), data.size()));
}

TEST_P(UcxAgentTest, AgentAllocatedRegionsTakeWritesAndAreFreedOnDeregistration) {
  auto source = UcxAgent::Create({GetParam(), ""});
  auto sink = UcxAgent::Create({GetParam(), ""});
  ASSERT_TRUE(source.ok() && sink.ok());
  auto target = (*sink)->AllocateMemory(1 << 20);
  auto from = (*source)->AllocateMemory(1 << 20);
  ASSERT_TRUE(target.ok() && from.ok()) << target.status() << from.status();
  const auto data = Pattern(1 << 20, 3);
  std::memcpy(from->base, data.data(), data.size());
  ASSERT_TRUE((*source)->Connect("sink", (*sink)->LocalAddress()).ok());
  Status st = (*source)->Write("sink", target->remote, {{from->base, data.size(), 0}},
                               In(std::chrono::seconds(10)));
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(0, std::memcmp(target->base, data.data(), data.size()));
  EXPECT_TRUE((*sink)->DeregisterMemory(target->id).ok());
  EXPECT_FALSE((*sink)->DeregisterMemory(target->id).ok());
  EXPECT_TRUE((*source)->DeregisterMemory(from->id).ok());
}

TEST(UcxStallTest, NoProgressFailsByTheStallTimerLongBeforeTheDeadline) {
  const size_t size = 64 << 20;
  StoppedSink stopped(size);
  const auto data = Pattern(size, 9);
  std::vector<WriteOp> ops;
  for (size_t off = 0; off < size; off += 4 << 20) ops.push_back({data.data() + off, 4 << 20, off});
  const auto start = Clock::now();
  Status st = stopped.source->Write("sink", stopped.sink.region, ops, In(std::chrono::seconds(60)),
                                    std::chrono::milliseconds(800));
  EXPECT_EQ(ReasonOf(st), FailureReason::kStall) << st;
  EXPECT_NE(st.message().find("stalled"), std::string::npos) << st;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
}

// A fence closes the connections peers made: a write through one from before never lands, and a
// peer reconnects through the new address.
TEST(UcxFenceTest, WritesThroughAConnectionFromBeforeTheFenceNeverLand) {
  auto source = UcxAgent::Create({"tcp", ""});
  auto sink = UcxAgent::Create({"tcp", ""});
  ASSERT_TRUE(source.ok() && sink.ok());
  std::vector<char> target(1 << 16, 0);
  auto region = (*sink)->RegisterMemory(target.data(), target.size(), MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  const std::string address = (*sink)->LocalAddress();
  ASSERT_TRUE((*source)->Connect("sink", address).ok());
  const auto first = Pattern(4096, 1), late = Pattern(4096, 2);
  ASSERT_TRUE((*source)
                  ->Write("sink", region->remote, {{first.data(), first.size(), 0}},
                          In(std::chrono::seconds(5)))
                  .ok());
  ASSERT_TRUE((*sink)->Fence().ok());
  EXPECT_NE((*sink)->LocalAddress(), address);
  EXPECT_FALSE((*source)
                   ->Write("sink", region->remote, {{late.data(), late.size(), 0}},
                           In(std::chrono::seconds(3)))
                   .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(0, std::memcmp(target.data(), first.data(), first.size()));
  // Connect sees the new address and makes a new endpoint; the registration still holds.
  ASSERT_TRUE((*source)->Connect("sink", (*sink)->LocalAddress()).ok());
  ASSERT_TRUE((*source)
                  ->Write("sink", region->remote, {{late.data(), late.size(), 0}},
                          In(std::chrono::seconds(5)))
                  .ok());
  EXPECT_EQ(0, std::memcmp(target.data(), late.data(), late.size()));
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxAgentTest, ::testing::Values("tcp", "posix,sysv,cma,self"),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("tcp") : std::string("shm");
                         });

}  // namespace
}  // namespace pdspark::transport
