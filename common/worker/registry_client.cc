#include "common/worker/registry_client.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "common/security/grpc_credentials.h"
#include "grpcpp/grpcpp.h"

namespace pdspark::worker {

std::string NewIncarnationId() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  return absl::StrFormat("%016x", rng());
}

struct RegistryClient::RouterLink {
  std::string address;
  std::unique_ptr<v1::Registry::Stub> stub;
  std::string worker_id;  // empty until registered
  std::chrono::milliseconds interval{1000};
  std::chrono::steady_clock::time_point next;
  uint64_t sent_cache_version = 0;  // the cached prefixes this router has (0: none)
};

namespace {

// "host:port" -> every "ip:port" the host resolves to (the name itself when it does not).
std::vector<std::string> ResolveAll(const std::string& name) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos) return {name};
  const std::string host = name.substr(0, colon), port = name.substr(colon + 1);
  addrinfo hints{};
  // IPv4 first: "localhost" must not become two links (127.0.0.1 and ::1) to one router.
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0) {
    hints.ai_family = AF_INET6;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0) return {name};
  }
  std::set<std::string> addresses;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    const void* where =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, where, ip, sizeof(ip)) == nullptr) continue;
    addresses.insert(a->ai_family == AF_INET6 ? absl::StrCat("[", ip, "]:", port)
                                              : absl::StrCat(ip, ":", port));
  }
  freeaddrinfo(result);
  if (addresses.empty()) return {name};
  return {addresses.begin(), addresses.end()};
}

}  // namespace

RegistryClient::RegistryClient(std::vector<std::string> router_addresses,
                               v1::RegisterRequest registration, LoadFn load,
                               security::TlsOptions tls)
    : router_names_(std::move(router_addresses)),
      registration_(std::move(registration)),
      load_(std::move(load)),
      tls_(std::move(tls)) {
  auto credentials = security::MakeChannelCredentials(tls_);
  if (!credentials.ok()) {
    // The worker validated its flags at startup; reaching here means the files vanished since.
    LOG_ERROR("registry TLS credentials: {}; registration will fail",
              credentials.status().ToString());
    credentials_ = grpc::InsecureChannelCredentials();
  } else {
    credentials_ = *std::move(credentials);
  }
}

void RegistryClient::Resolve() {
  for (const std::string& name : router_names_) {
    for (std::string& address : ResolveAll(name)) {
      const bool known = std::any_of(links_.begin(), links_.end(),
                                     [&](const auto& l) { return l->address == address; });
      if (known) continue;
      auto link = std::make_unique<RouterLink>();
      link->stub = v1::Registry::NewStub(security::CreateChannel(address, credentials_, tls_));
      link->address = std::move(address);
      links_.push_back(std::move(link));
    }
  }
}

RegistryClient::~RegistryClient() { Stop(); }

void RegistryClient::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void RegistryClient::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& link : links_) {
    if (link->worker_id.empty()) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::DrainRequest request;
    request.set_worker_id(link->worker_id);
    v1::DrainResponse response;
    link->stub->Drain(&ctx, request, &response);
    link->worker_id.clear();
  }
  registered_count_ = 0;
}

void RegistryClient::Loop() {
  auto next_resolve = std::chrono::steady_clock::now();
  while (true) {
    if (std::chrono::steady_clock::now() >= next_resolve) {
      Resolve();  // router replicas come and go behind one name
      next_resolve = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    }
    auto next = next_resolve;
    for (auto& link : links_) {
      if (std::chrono::steady_clock::now() >= link->next) Tick(*link);
      next = std::min(next, link->next);
    }
    std::unique_lock lock(mu_);
    if (wake_.wait_until(lock, next, [&] { return stop_; })) return;
  }
}

void RegistryClient::Tick(RouterLink& link) {
  const auto now = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (link.worker_id.empty()) {
    v1::RegisterResponse response;
    grpc::Status status = link.stub->Register(&ctx, registration_, &response);
    if (!status.ok()) {
      LOG_DEBUG("register with router={} failed: {}", link.address, status.error_message());
      link.next = now + std::chrono::milliseconds(500);
      return;
    }
    link.worker_id = response.worker_id();
    link.sent_cache_version = 0;
    link.interval =
        std::chrono::milliseconds(std::max<uint32_t>(100, response.heartbeat_interval_ms()));
    ++registered_count_;
    LOG_INFO("registered router={} worker_id={} incarnation={}", link.address, link.worker_id,
             registration_.incarnation_id());
    link.next = now + link.interval;
    return;
  }
  v1::HeartbeatRequest request;
  request.set_worker_id(link.worker_id);
  request.set_incarnation_id(registration_.incarnation_id());
  *request.mutable_load() = load_();
  // The cached prefixes go whole, and only when they changed since this router got them.
  const uint64_t cache_version = request.load().cache_version();
  if (cache_version != 0 && cache_version == link.sent_cache_version) {
    request.mutable_load()->clear_cached_prefixes();
    request.mutable_load()->clear_cached_prefix_lengths();
    request.mutable_load()->set_cached_prefixes_unchanged(true);
  }
  v1::HeartbeatResponse response;
  grpc::Status status = link.stub->Heartbeat(&ctx, request, &response);
  if (status.ok() && response.known()) {
    link.sent_cache_version = cache_version;
    link.next = now + link.interval;
    return;
  }
  // The router restarted or dropped us: register again right away.
  LOG_WARN("router={} does not know worker_id={} ({}); registering again", link.address,
           link.worker_id, status.ok() ? "unknown incarnation" : status.error_message());
  link.worker_id.clear();
  --registered_count_;
  link.next = now;
}

}  // namespace pdspark::worker
