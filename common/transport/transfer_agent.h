// The small transfer interface the workers use to move per-request cache state between
// processes (in the spirit of NIXL's agent API): register memory once, exchange descriptors
// over the gRPC control plane, then post one-sided writes into the peer's registered memory
// and a flush that completes once they are visible there.
//
// Implementations: UcxAgent (UCX ucp RMA over tcp, shared memory, RDMA or CUDA transports)
// and InProcessAgent (memcpy between agents of one process, for colocated tests).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::transport {

using Clock = std::chrono::steady_clock;

// What a peer needs to write into a registered region: its address and a packed remote key.
// Serialise() produces the bytes carried in gRPC messages.
struct RemoteRegion {
  uint64_t base = 0;
  uint64_t size = 0;
  std::string packed_key;

  std::string Serialize() const;
  static StatusOr<RemoteRegion> Deserialize(std::string_view bytes);
};

// Where registered memory lives: host memory now; device memory (a CUDA backend's KV pool) is
// for transports that reach GPUs (UCX cuda_ipc, RDMA with GPUDirect).
enum class MemoryKind { kHost, kCuda };

// A local region registered with the agent; valid until the agent is destroyed or it is
// deregistered.
struct LocalRegion {
  uint64_t id = 0;
  void* base = nullptr;
  size_t size = 0;
  RemoteRegion remote;  // the descriptor to hand to peers
};

// One write of `size` bytes from `source` (inside a registered or plain host buffer) to
// `remote_offset` bytes into a peer's region.
struct WriteOp {
  const void* source = nullptr;
  size_t size = 0;
  uint64_t remote_offset = 0;
};

// Why a transfer failed, attached to its Status as a payload so that metrics and logs name the
// cause without parsing messages.
enum class FailureReason { kStall, kDeadline, kPeerFailed, kCancelled, kRefused, kInvalid };
std::string_view FailureReasonName(FailureReason reason);
Status TransferError(FailureReason reason, absl::StatusCode code, std::string_view message);
// The reason attached by TransferError, or one derived from the status code.
FailureReason ReasonOf(const Status& status);

// Completion of operations posted to an agent (writes and flushes). They complete on the
// agent's progress thread; the poster waits here. `completed` only grows, which is what tells a
// slow transfer (it grows) from a stalled one (it does not).
class TransferTracker {
 public:
  void Add(int64_t operations);
  // One operation finished, successfully or with its error (the first error is kept).
  void Complete(const Status& status);
  int64_t pending() const;
  int64_t completed() const;
  Status status() const;
  // Waits until the completed count differs from `seen`, nothing is pending, or `until`.
  void WaitForChange(int64_t seen, Clock::time_point until);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t pending_ = 0;
  int64_t completed_ = 0;
  Status status_;
};

// The no-progress stall timer: stalled when operations are pending and none completed for
// `stall`. A single write must take less than `stall` to move.
class ProgressWatch {
 public:
  explicit ProgressWatch(std::chrono::milliseconds stall) : stall_(stall) {}
  bool Stalled(const TransferTracker& tracker, Clock::time_point now);
  Clock::time_point last_progress() const { return last_progress_; }
  std::chrono::milliseconds stall() const { return stall_; }

 private:
  std::chrono::milliseconds stall_;
  int64_t seen_ = -1;
  Clock::time_point last_progress_;
};

class TransferAgent {
 public:
  virtual ~TransferAgent() = default;

  // The name of the transport in use ("ucx:tcp", "ucx:posix,sysv,cma,self", "inprocess").
  virtual std::string TransportName() const = 0;

  // Bytes a peer passes to Connect() to reach this agent.
  virtual std::string LocalAddress() = 0;

  // Registers memory someone else allocated (the engine's KV pool), so peers can write into it.
  virtual StatusOr<LocalRegion> RegisterMemory(void* base, size_t size, MemoryKind kind) = 0;
  // Memory the transport allocates and registers itself, for the long-lived regions peers
  // write into: UCX places it where same-host peers can map it (a System V or POSIX shared
  // segment), so their puts become plain stores instead of messages this side must progress.
  // DeregisterMemory frees it.
  virtual StatusOr<LocalRegion> AllocateMemory(size_t size) = 0;
  virtual Status DeregisterMemory(uint64_t region_id) = 0;

  // Creates (or reuses) the endpoint to the peer known by `peer_id` (e.g. its incarnation id).
  virtual Status Connect(const std::string& peer_id, const std::string& peer_address) = 0;
  virtual Status Disconnect(const std::string& peer_id) = 0;

  // Posts the writes without waiting; each completes into `tracker`. The sources must stay
  // valid until the tracker has nothing pending. Refuses (posting nothing) writes outside the
  // region.
  virtual Status PostWrites(const std::string& peer_id, const RemoteRegion& region,
                            std::span<const WriteOp> ops, TransferTracker& tracker) = 0;
  // Posts a flush that completes once every write posted to the peer before it is visible in
  // the peer's memory (remote completion).
  virtual Status PostFlush(const std::string& peer_id, TransferTracker& tracker) = 0;
  // Force-closes the endpoint to a stalled or dead peer: every outstanding operation to it
  // completes with an error, and nothing posted earlier can land afterwards. The next Connect
  // creates a new endpoint.
  virtual void AbortPeer(const std::string& peer_id) = 0;
  // Closes every connection peers made to this agent (and this agent's own endpoints), so that
  // a write a peer posted before, still queued in its kernel or on the wire, can no longer land
  // here: over a network transport it meets a closed socket. LocalAddress() changes, and peers
  // reach the agent again by Connect with the new one. Registered memory stays registered.
  // Shared-memory transports have no connection to close: a peer writes by itself, and only
  // its own deadline stops it.
  virtual Status Fence() = 0;

  // Posts the writes and a flush and waits for them (AwaitCompletion); never hangs.
  Status Write(const std::string& peer_id, const RemoteRegion& region,
               const std::vector<WriteOp>& ops, Clock::time_point deadline,
               std::chrono::milliseconds stall = std::chrono::seconds(5));
};

// Waits until nothing in `tracker` is pending. When `deadline` passes first it stops waiting
// for success but still lets the posted operations drain (so none lands after the caller frees
// its memory or the peer reuses the target), and fails with kDeadline; when nothing completes
// for `stall` it aborts the peer and fails with kStall. Otherwise returns the tracker's status.
// On return the tracker has nothing pending unless even the abort left operations behind
// (logged; the caller must then not free their sources).
Status AwaitCompletion(TransferAgent& agent, const std::string& peer_id, TransferTracker& tracker,
                       Clock::time_point deadline, std::chrono::milliseconds stall);

}  // namespace pdspark::transport
