#include "common/security/grpc_credentials.h"

#include "grpcpp/create_channel.h"

namespace pdspark::security {

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  RETURN_IF_ERROR(ValidateTlsOptions(tls, /*serving=*/true));
  grpc::SslServerCredentialsOptions options(
      tls.ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
      : tls.require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          // A client that shows a certificate must show a valid one; others may connect.
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(tls.cert_file, "--tls-cert"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(tls.key_file, "--tls-key"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile(tls.ca_file, "--tls-ca"));
  }
  return grpc::SslServerCredentials(options);
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  RETURN_IF_ERROR(ValidateTlsOptions(tls, /*serving=*/false));
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile(tls.ca_file, "--tls-ca"));
  }
  if (!tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPemFile(tls.cert_file, "--tls-cert"));
    ASSIGN_OR_RETURN(options.pem_private_key, ReadPemFile(tls.key_file, "--tls-key"));
  }
  return grpc::SslCredentials(options);
}

grpc::ChannelArguments MakeChannelArguments(const TlsOptions& tls) {
  grpc::ChannelArguments args;
  if (tls.enabled() && !tls.server_name.empty()) {
    args.SetSslTargetNameOverride(tls.server_name);
  }
  return args;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                             const TlsOptions& tls) {
  return grpc::CreateCustomChannel(address, creds, MakeChannelArguments(tls));
}

}  // namespace pdspark::security
