// One gRPC channel per worker address, shared by all requests to that worker (a channel
// multiplexes calls over one HTTP/2 connection; creating one per request would reconnect).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/channel.h"

namespace pdspark::router {

class WorkerChannels {
 public:
  std::shared_ptr<grpc::Channel> Get(const std::string& address);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

}  // namespace pdspark::router
