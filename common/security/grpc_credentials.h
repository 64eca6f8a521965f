// gRPC credentials from TlsOptions: insecure when TLS is off, TLS (mutual when configured)
// otherwise. Every gRPC server and channel in pdspark is built through these.
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/security/tls_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace pdspark::security {

// Server side: needs cert and key when TLS is on; with a CA the client certificate is
// verified, and required when require_client_cert.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls);

// Client side: the CA verifies the server (system roots when no CA); cert and key, when
// given, are presented for mutual TLS.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& tls);

// Channel arguments that go with the credentials (the server-name override).
grpc::ChannelArguments MakeChannelArguments(const TlsOptions& tls);

// A channel to `address` with both of the above.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                             const TlsOptions& tls);

}  // namespace pdspark::security
