// TransferAgent over UCX ucp: one context and worker per agent, endpoints cached per peer id,
// memory registered once with ucp_mem_map, one-sided puts plus an endpoint flush for remote
// completion, each completing into its TransferTracker from a completion callback. A progress
// thread sleeping on the worker's event fd keeps the worker moving, so software-emulated RMA
// (tcp) completes even when this side posts nothing and posters never spin.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/transport/transfer_agent.h"

namespace pdspark::transport {

struct UcxOptions {
  // UCX_TLS: "tcp", "posix,sysv,cma,self", "rc,cuda_copy,cuda_ipc" (GPU nodes), or "" for
  // UCX's own choice. Overrides the environment variable of the same name when set.
  std::string transports = "tcp";
  // UCX_NET_DEVICES, e.g. "lo" or "mlx5_0:1"; empty = all.
  std::string net_devices;
};

class UcxAgent : public TransferAgent {
 public:
  static StatusOr<std::unique_ptr<UcxAgent>> Create(const UcxOptions& options);
  ~UcxAgent() override;

  std::string TransportName() const override;
  std::string LocalAddress() override;
  StatusOr<LocalRegion> RegisterMemory(void* base, size_t size, MemoryKind kind) override;
  StatusOr<LocalRegion> AllocateMemory(size_t size) override;
  Status DeregisterMemory(uint64_t region_id) override;
  Status Connect(const std::string& peer_id, const std::string& peer_address) override;
  Status Disconnect(const std::string& peer_id) override;
  Status PostWrites(const std::string& peer_id, const RemoteRegion& region,
                    std::span<const WriteOp> ops, TransferTracker& tracker) override;
  Status PostFlush(const std::string& peer_id, TransferTracker& tracker) override;
  void AbortPeer(const std::string& peer_id) override;
  // Replaces the ucp worker: its sockets (every connection from and to peers) close.
  Status Fence() override;

 private:
  struct Handles;
  struct Peer;
  struct ErrorCallback;  // UCX's endpoint error callback: it looks the peer up in peers_
  explicit UcxAgent(UcxOptions options);
  Status Init();
  Status CreateWorkerLocked();
  // Makes the worker a fence destroyed, if it is not there yet; false while UCX refuses.
  bool EnsureWorkerLocked();
  void ProgressLoop();
  StatusOr<Peer*> UsablePeerLocked(const std::string& peer_id);
  StatusOr<void*> RkeyLocked(Peer& peer, const std::string& packed_key);
  StatusOr<LocalRegion> MapLocked(void* base, size_t size, bool allocate, MemoryKind kind);
  void ClosePeerLocked(Peer& peer, bool force);

  UcxOptions options_;
  std::unique_ptr<Handles> handles_;
  std::string address_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;
  std::map<uint64_t, void*> regions_;  // id -> ucp_mem_h
  uint64_t next_region_id_ = 1;
  std::atomic<bool> stop_{false};
  std::thread progress_thread_;
};

}  // namespace pdspark::transport
