#include "common/transport/ucx_agent.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::transport {

struct UcxAgent::Handles {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
};

struct UcxAgent::Peer {
  std::string id;
  std::string address;  // the worker address the endpoint was made to
  ucp_ep_h ep = nullptr;
  // Set by UCX's error callback (peer died, link cut): the endpoint is unusable.
  bool failed = false;
  ucs_status_t error = UCS_OK;              // what it reported
  std::map<std::string, ucp_rkey_h> rkeys;  // packed key -> unpacked key
};

namespace {

// Debian's absl has its own absl::string_view (not std::string_view): pass std::string here.
Status UcsError(ucs_status_t status, const std::string& what) {
  return absl::UnavailableError(absl::StrCat("UCX ", what, ": ", ucs_status_string(status)));
}

bool HasNetworkTransport(const std::string& transports) {
  if (transports.empty() || transports == "all") return true;
  for (const char* name : {"tcp", "rc", "ud", "dc", "ib"}) {
    if (transports.find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

UcxAgent::UcxAgent(UcxOptions options)
    : options_(std::move(options)), handles_(std::make_unique<Handles>()) {}

struct UcxAgent::ErrorCallback {
  // `arg` is the agent. UCX calls this from inside ucp_worker_progress (or another ucp call),
  // and every such call is made under mu_: the lookup needs no lock of its own.
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    // UCX reports errors on an endpoint while it closes too, when its peer entry may already
    // be gone: the entry is found by its endpoint rather than held by pointer.
    for (auto& [id, peer] : static_cast<UcxAgent*>(arg)->peers_) {
      if (peer->ep != ep) continue;
      peer->error = status;
      peer->failed = true;
      LOG_WARN("ucx endpoint error peer={} status={}", id, ucs_status_string(status));
      return;
    }
    LOG_INFO("ucx error on an endpoint already closed, ignored status={}",
             ucs_status_string(status));
  }
};

StatusOr<std::unique_ptr<UcxAgent>> UcxAgent::Create(const UcxOptions& options) {
  std::unique_ptr<UcxAgent> agent(new UcxAgent(options));
  RETURN_IF_ERROR(agent->Init());
  agent->progress_thread_ = std::thread([a = agent.get()] { a->ProgressLoop(); });
  return agent;
}

Status UcxAgent::Init() {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return UcsError(st, "config read");
  if (!options_.transports.empty()) ucp_config_modify(config, "TLS", options_.transports.c_str());
  if (!options_.net_devices.empty()) {
    ucp_config_modify(config, "NET_DEVICES", options_.net_devices.c_str());
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  st = ucp_init(&params, config, &handles_->context);
  ucp_config_release(config);
  if (st != UCS_OK) return UcsError(st, absl::StrCat("init with UCX_TLS=", options_.transports));

  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(CreateWorkerLocked());
  LOG_INFO("ucx agent ready transports={} address_bytes={}", TransportName(), address_.size());
  return absl::OkStatus();
}

Status UcxAgent::CreateWorkerLocked() {
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call is made under mu_
  ucs_status_t st = ucp_worker_create(handles_->context, &wparams, &handles_->worker);
  if (st != UCS_OK) return UcsError(st, "worker create");
  st = ucp_worker_get_efd(handles_->worker, &handles_->event_fd);
  if (st != UCS_OK) return UcsError(st, "worker event fd");

  ucp_address_t* address = nullptr;
  size_t length = 0;
  st = ucp_worker_get_address(handles_->worker, &address, &length);
  if (st != UCS_OK) return UcsError(st, "worker address");
  address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(handles_->worker, address);
  return absl::OkStatus();
}

bool UcxAgent::EnsureWorkerLocked() {
  if (handles_->worker != nullptr) return true;
  const Status created = CreateWorkerLocked();
  if (!created.ok()) {
    // A fence replaced the worker while the network device was down (no carrier): until it is
    // back this agent has no address, and transfers to it fail at once.
    LOG_WARN("ucx worker not recreated yet error={}", created.ToString());
  }
  return created.ok();
}

std::string UcxAgent::LocalAddress() {
  std::lock_guard lock(mu_);
  return EnsureWorkerLocked() ? address_ : std::string();
}

Status UcxAgent::Fence() {
  std::lock_guard lock(mu_);
  // Our own endpoints first (their outstanding operations fail), then the worker with every
  // connection peers opened to it: its sockets close, so a write still queued in a peer's
  // kernel meets a closed port. Registered memory belongs to the context and stays. The next
  // worker is made now if the network allows it, else on the next call that needs one.
  for (auto& [id, peer] : peers_) ClosePeerLocked(*peer, /*force=*/true);
  peers_.clear();
  if (handles_->worker != nullptr) ucp_worker_destroy(handles_->worker);
  handles_->worker = nullptr;
  handles_->event_fd = -1;
  address_.clear();
  EnsureWorkerLocked();
  LOG_INFO("ucx fence: every connection closed, new worker address_bytes={}", address_.size());
  return absl::OkStatus();
}

UcxAgent::~UcxAgent() {
  stop_ = true;
  if (progress_thread_.joinable()) progress_thread_.join();
  std::lock_guard lock(mu_);
  for (auto& [id, peer] : peers_) ClosePeerLocked(*peer, /*force=*/true);
  peers_.clear();
  for (auto& [id, memh] : regions_) {
    ucp_mem_unmap(handles_->context, static_cast<ucp_mem_h>(memh));
  }
  if (handles_->worker) ucp_worker_destroy(handles_->worker);
  if (handles_->context) ucp_cleanup(handles_->context);
}

std::string UcxAgent::TransportName() const {
  return absl::StrCat("ucx:", options_.transports.empty() ? "auto" : options_.transports);
}

void UcxAgent::ProgressLoop() {
  while (!stop_) {
    bool armed = false;
    int event_fd = -1;
    {
      std::lock_guard lock(mu_);
      if (handles_->worker != nullptr) {
        while (ucp_worker_progress(handles_->worker) != 0) {
        }
        armed = ucp_worker_arm(handles_->worker) == UCS_OK;
        event_fd = handles_->event_fd;
      }
    }
    // Sleep on the event fd when nothing is pending; wake at least every 5 ms to see stop_ (and
    // a worker a fence replaced, whose fd this may still be).
    pollfd pfd{event_fd, POLLIN, 0};
    poll(&pfd, 1, armed ? 5 : 0);
  }
}

StatusOr<LocalRegion> UcxAgent::RegisterMemory(void* base, size_t size, MemoryKind kind) {
  std::lock_guard lock(mu_);
  return MapLocked(base, size, /*allocate=*/false, kind);
}

StatusOr<LocalRegion> UcxAgent::AllocateMemory(size_t size) {
  std::lock_guard lock(mu_);
  return MapLocked(nullptr, size, /*allocate=*/true, MemoryKind::kHost);
}

StatusOr<LocalRegion> UcxAgent::MapLocked(void* base, size_t size, bool allocate, MemoryKind kind) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = base;
  params.length = size;
  params.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
  params.memory_type = kind == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(handles_->context, &params, &memh);
  if (st != UCS_OK) {
    return UcsError(st, absl::StrCat(allocate ? "allocation of " : "mem_map of ", size, " bytes"));
  }
  if (allocate) {
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    st = ucp_mem_query(memh, &attr);
    if (st != UCS_OK) {
      ucp_mem_unmap(handles_->context, memh);
      return UcsError(st, "mem query");
    }
    base = attr.address;
  }
  void* key = nullptr;
  size_t key_size = 0;
  st = ucp_rkey_pack(handles_->context, memh, &key, &key_size);
  if (st != UCS_OK) {
    ucp_mem_unmap(handles_->context, memh);
    return UcsError(st, "rkey pack");
  }
  LocalRegion region;
  region.id = next_region_id_++;
  region.base = base;
  region.size = size;
  region.remote.base = reinterpret_cast<uint64_t>(base);
  region.remote.size = size;
  region.remote.packed_key.assign(static_cast<const char*>(key), key_size);
  ucp_rkey_buffer_release(key);
  regions_[region.id] = memh;
  return region;
}

Status UcxAgent::DeregisterMemory(uint64_t region_id) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end()) return absl::NotFoundError(absl::StrCat("region ", region_id));
  ucp_mem_unmap(handles_->context, static_cast<ucp_mem_h>(it->second));
  regions_.erase(it);
  return absl::OkStatus();
}

Status UcxAgent::Connect(const std::string& peer_id, const std::string& peer_address) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer_id);
  // A peer that fenced has a new address: its old connections are closed.
  if (it != peers_.end() && it->second->ep != nullptr && !it->second->failed &&
      it->second->address == peer_address) {
    return absl::OkStatus();
  }
  if (it != peers_.end()) {
    ClosePeerLocked(*it->second, /*force=*/true);
    peers_.erase(it);
  }
  if (peer_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("peer ", peer_id, " has no UCX address"));
  }
  if (!EnsureWorkerLocked()) {
    return absl::UnavailableError(absl::StrCat("UCX has no worker to connect to peer ", peer_id,
                                               " from (network device down?)"));
  }
  auto peer = std::make_unique<Peer>();
  peer->id = peer_id;
  peer->address = peer_address;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  // Network transports report a dead peer as an endpoint error instead of a hang. The
  // shared-memory ones (posix, sysv, cma) cannot in UCX 1.13 and refuse that mode; there the
  // write deadline and the gRPC control plane are what notice a dead peer.
  params.err_mode = HasNetworkTransport(options_.transports) ? UCP_ERR_HANDLING_MODE_PEER
                                                             : UCP_ERR_HANDLING_MODE_NONE;
  // The callback finds the peer by its endpoint: UCX may call it after the peer is gone.
  params.err_handler.cb = ErrorCallback::OnEndpointError;
  params.err_handler.arg = this;
  ucs_status_t st = ucp_ep_create(handles_->worker, &params, &peer->ep);
  if (st != UCS_OK) {
    return UcsError(st, absl::StrCat("connect to peer ", peer_id, " from ", TransportName(),
                                     " (both workers need a common --ucx-tls transport)"));
  }
  peers_[peer_id] = std::move(peer);
  return absl::OkStatus();
}

Status UcxAgent::Disconnect(const std::string& peer_id) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return absl::OkStatus();
  ClosePeerLocked(*it->second, /*force=*/it->second->failed);
  peers_.erase(it);
  return absl::OkStatus();
}

void UcxAgent::ClosePeerLocked(Peer& peer, bool force) {
  for (auto& [packed, rkey] : peer.rkeys) ucp_rkey_destroy(rkey);
  peer.rkeys.clear();
  if (!peer.ep) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t request = ucp_ep_close_nbx(peer.ep, &param);
  peer.ep = nullptr;
  if (UCS_PTR_IS_PTR(request)) {
    // Bounded wait: a graceful close to a dead peer must not hang shutdown.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < until) {
      ucp_worker_progress(handles_->worker);
    }
    ucp_request_free(request);
  }
}

StatusOr<void*> UcxAgent::RkeyLocked(Peer& peer, const std::string& packed_key) {
  auto it = peer.rkeys.find(packed_key);
  if (it != peer.rkeys.end()) return static_cast<void*>(it->second);
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(peer.ep, packed_key.data(), &rkey);
  if (st != UCS_OK) return UcsError(st, absl::StrCat("rkey unpack for peer ", peer.id));
  peer.rkeys[packed_key] = rkey;
  return static_cast<void*>(rkey);
}

StatusOr<UcxAgent::Peer*> UcxAgent::UsablePeerLocked(const std::string& peer_id) {
  auto it = peers_.find(peer_id);
  if (it == peers_.end() || it->second->ep == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("not connected to peer ", peer_id, " (never, or since an abort)"));
  }
  if (it->second->failed) {
    return TransferError(
        FailureReason::kPeerFailed, absl::StatusCode::kUnavailable,
        absl::StrCat("UCX endpoint to peer ", peer_id, " failed (",
                     ucs_status_string(it->second->error), "): the peer died or the link broke"));
  }
  return it->second.get();
}

namespace {

// Completion callback of puts and flushes: the tracker is the operation's user data.
void OnOperationDone(void* request, ucs_status_t status, void* user_data) {
  auto* tracker = static_cast<TransferTracker*>(user_data);
  if (status == UCS_OK) {
    tracker->Complete(absl::OkStatus());
  } else {
    // Cancelled operations come from a failed or aborted endpoint: either way the peer.
    tracker->Complete(
        TransferError(FailureReason::kPeerFailed, absl::StatusCode::kUnavailable,
                      absl::StrCat("UCX operation failed: ", ucs_status_string(status),
                                   " (the peer died or the link broke)")));
  }
  ucp_request_free(request);
}

// Accounts for an operation just posted: completed inline, failed at once, or in flight (its
// callback completes it later, under the same lock, so no completion can be missed).
Status Track(ucs_status_ptr_t request, TransferTracker& tracker, const char* what) {
  if (request == nullptr) {
    tracker.Complete(absl::OkStatus());
    return absl::OkStatus();
  }
  if (UCS_PTR_IS_ERR(request)) {
    Status st = UcsError(UCS_PTR_STATUS(request), what);
    tracker.Complete(st);
    return st;
  }
  return absl::OkStatus();
}

ucp_request_param_t CallbackParam(TransferTracker& tracker) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = OnOperationDone;
  param.user_data = &tracker;
  return param;
}

}  // namespace

Status UcxAgent::PostWrites(const std::string& peer_id, const RemoteRegion& region,
                            std::span<const WriteOp> ops, TransferTracker& tracker) {
  for (const WriteOp& op : ops) {
    if (op.remote_offset > region.size || op.size > region.size - op.remote_offset) {
      return absl::OutOfRangeError(absl::StrCat("write of ", op.size, " bytes at offset ",
                                                op.remote_offset, " exceeds the remote region of ",
                                                region.size, " bytes"));
    }
  }
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(Peer * peer, UsablePeerLocked(peer_id));
  ASSIGN_OR_RETURN(void* rkey, RkeyLocked(*peer, region.packed_key));
  const ucp_request_param_t param = CallbackParam(tracker);
  for (const WriteOp& op : ops) {
    if (op.size == 0) continue;
    tracker.Add(1);
    RETURN_IF_ERROR(Track(ucp_put_nbx(peer->ep, op.source, op.size, region.base + op.remote_offset,
                                      static_cast<ucp_rkey_h>(rkey), &param),
                          tracker, "put"));
  }
  return absl::OkStatus();
}

Status UcxAgent::PostFlush(const std::string& peer_id, TransferTracker& tracker) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(Peer * peer, UsablePeerLocked(peer_id));
  const ucp_request_param_t param = CallbackParam(tracker);
  tracker.Add(1);
  return Track(ucp_ep_flush_nbx(peer->ep, &param), tracker, "flush");
}

void UcxAgent::AbortPeer(const std::string& peer_id) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return;
  LOG_WARN("ucx aborting endpoint peer={}", peer_id);
  // The forced close completes every outstanding put and flush to the peer with an error
  // (their callbacks run during the progress inside ClosePeerLocked).
  ClosePeerLocked(*it->second, /*force=*/true);
  peers_.erase(it);
}

}  // namespace pdspark::transport
