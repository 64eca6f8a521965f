// One gRPC channel per worker address, shared by all requests to that worker (a channel
// multiplexes calls over one HTTP/2 connection; creating one per request would reconnect).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/security/tls_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace pdspark::router {

class WorkerChannels {
 public:
  std::shared_ptr<grpc::Channel> Get(const std::string& address);
  // TLS for channels created from now on (plaintext until called).
  void SetCredentials(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      security::TlsOptions tls);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  security::TlsOptions tls_;
};

}  // namespace pdspark::router
