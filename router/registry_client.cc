#include "router/registry_client.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pdspark::router {

RegistryClient::RegistryClient(Options options)
    : options_(std::move(options)),
      stub_(v1::Registry::NewStub(grpc::CreateChannel(options_.router_address,
                                                      grpc::InsecureChannelCredentials()))) {
  if (options_.registration.incarnation_id().empty()) {
    options_.registration.set_incarnation_id(NewIncarnationId());
  }
}

RegistryClient::~RegistryClient() { Stop(); }

std::string RegistryClient::NewIncarnationId() {
  std::random_device rd;
  std::mt19937_64 rng((uint64_t{rd()} << 32) ^ rd() ^
                      std::chrono::steady_clock::now().time_since_epoch().count());
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

Status RegistryClient::RegisterOnce() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::RegisterResponse response;
  grpc::Status status = stub_->Register(&ctx, options_.registration, &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("Register at ", options_.router_address, ": ",
                                               status.error_message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  worker_id_ = response.worker_id();
  if (response.heartbeat_interval_ms() > 0) {
    interval_ = std::chrono::milliseconds(response.heartbeat_interval_ms());
  }
  LOG_INFO("registered with router router={} worker={} interval_ms={}", options_.router_address,
           worker_id_, interval_.count());
  return absl::OkStatus();
}

Status RegistryClient::Start(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  Status status = RegisterOnce();
  while (!status.ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    status = RegisterOnce();
  }
  RETURN_IF_ERROR(status);
  thread_ = std::thread([this] { HeartbeatLoop(); });
  return absl::OkStatus();
}

void RegistryClient::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string RegistryClient::worker_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_id_;
}

void RegistryClient::HeartbeatLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_);
    if (stop_) break;
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id_);
    request.set_incarnation_id(options_.registration.incarnation_id());
    const auto interval = interval_;
    lock.unlock();
    if (options_.load) *request.mutable_load() = options_.load();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + interval);
    v1::HeartbeatResponse response;
    grpc::Status status = stub_->Heartbeat(&ctx, request, &response);
    if (status.ok() && !response.known()) {
      LOG_WARN("router does not know this worker; registering again router={}",
               options_.router_address);
      RegisterOnce().IgnoreError();
    } else if (!status.ok()) {
      LOG_DEBUG("heartbeat failed router={} error={}", options_.router_address,
                status.error_message());
    }
    lock.lock();
  }
}

}  // namespace pdspark::router
