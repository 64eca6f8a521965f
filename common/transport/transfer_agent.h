// The small transfer interface the workers use to move per-request cache state between
// processes (in the spirit of NIXL's agent API): register memory once, exchange descriptors
// over the gRPC control plane, then post one-sided writes into the peer's registered memory.
//
// Implementations: UcxAgent (UCX ucp RMA over tcp, shared memory, RDMA or CUDA transports)
// and InProcessAgent (memcpy between agents of one process, for colocated tests).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
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

class TransferAgent {
 public:
  virtual ~TransferAgent() = default;

  // The name of the transport in use ("ucx:tcp", "ucx:posix,sysv,cma,self", "inprocess").
  virtual std::string TransportName() const = 0;

  // Bytes a peer passes to Connect() to reach this agent.
  virtual std::string LocalAddress() const = 0;

  virtual StatusOr<LocalRegion> RegisterMemory(void* base, size_t size) = 0;
  virtual Status DeregisterMemory(uint64_t region_id) = 0;

  // Creates (or reuses) the endpoint to the peer known by `peer_id` (e.g. its incarnation id).
  virtual Status Connect(const std::string& peer_id, const std::string& peer_address) = 0;
  virtual Status Disconnect(const std::string& peer_id) = 0;

  // Posts the writes and waits until all of them are complete at the peer (remote completion),
  // or fails with DeadlineExceeded when `deadline` passes first; never hangs.
  virtual Status Write(const std::string& peer_id, const RemoteRegion& region,
                       const std::vector<WriteOp>& ops, Clock::time_point deadline) = 0;
};

}  // namespace pdspark::transport
