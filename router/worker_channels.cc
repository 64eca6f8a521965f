#include "router/worker_channels.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pdspark::router {

std::shared_ptr<grpc::Channel> WorkerChannels::Get(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& channel = channels_[address];
  if (channel == nullptr) {
    // No client keepalive pings: servers with default settings answer frequent pings with
    // GOAWAY, breaking live streams. Dead workers are caught by heartbeats and deadlines.
    channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  return channel;
}

}  // namespace pdspark::router
