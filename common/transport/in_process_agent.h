// TransferAgent between agents of one process: writes are memcpy into the peer's registered
// region. Used by colocated prefill+decode and by tests that need no network.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/transport/transfer_agent.h"

namespace pdspark::transport {

class InProcessAgent : public TransferAgent {
 public:
  InProcessAgent();
  ~InProcessAgent() override;

  std::string TransportName() const override { return "inprocess"; }
  std::string LocalAddress() override { return address_; }
  StatusOr<LocalRegion> RegisterMemory(void* base, size_t size, MemoryKind kind) override;
  StatusOr<LocalRegion> AllocateMemory(size_t size) override;
  Status DeregisterMemory(uint64_t region_id) override;
  Status Connect(const std::string& peer_id, const std::string& peer_address) override;
  Status Disconnect(const std::string& peer_id) override;
  // Copies at once: every write and flush is complete when these return.
  Status PostWrites(const std::string& peer_id, const RemoteRegion& region,
                    std::span<const WriteOp> ops, TransferTracker& tracker) override;
  Status PostFlush(const std::string& peer_id, TransferTracker& tracker) override;
  void AbortPeer(const std::string& peer_id) override { Disconnect(peer_id).IgnoreError(); }
  // Nothing to close: every write completed when PostWrites returned.
  Status Fence() override { return absl::OkStatus(); }

 private:
  bool ContainsRegion(const RemoteRegion& region);

  std::string address_;
  std::mutex mu_;
  std::map<uint64_t, LocalRegion> regions_;
  std::map<uint64_t, std::unique_ptr<char[]>> allocated_;  // freed on deregistration
  std::map<std::string, std::string> peers_;               // peer id -> address
  uint64_t next_region_id_ = 1;
};

}  // namespace pdspark::transport
