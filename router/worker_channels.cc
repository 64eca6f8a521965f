#include "router/worker_channels.h"

#include "grpcpp/create_channel.h"
#include "common/security/grpc_credentials.h"
#include "grpcpp/security/credentials.h"

namespace pdspark::router {

std::shared_ptr<grpc::Channel> WorkerChannels::Get(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& channel = channels_[address];
  if (channel == nullptr) {
    // No client keepalive pings: servers with default settings answer frequent pings with
    // GOAWAY, breaking live streams. Dead workers are caught by heartbeats and deadlines.
    channel = credentials_ ? security::CreateChannel(address, credentials_, tls_)
                           : grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  return channel;
}

void WorkerChannels::SetCredentials(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                    security::TlsOptions tls) {
  std::lock_guard<std::mutex> lock(mu_);
  credentials_ = std::move(credentials);
  tls_ = std::move(tls);
}

}  // namespace pdspark::router
