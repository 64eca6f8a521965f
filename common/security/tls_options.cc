#include "common/security/tls_options.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pdspark::security {

void AddTlsFlags(CLI::App& app, TlsOptions& tls) {
  app.add_option("--tls-cert", tls.cert_file,
                 "PEM certificate (chain) of this process for its gRPC servers and as client "
                 "certificate on the links it opens; enables TLS");
  app.add_option("--tls-key", tls.key_file, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls.ca_file,
                 "PEM CA bundle peers' certificates must chain to; enables TLS");
  app.add_flag("--tls-require-client-cert", tls.require_client_cert,
               "gRPC servers refuse clients without a certificate from --tls-ca (mutual TLS)");
  app.add_option("--tls-server-name", tls.server_name,
                 "name to check in servers' certificates instead of the dialled host");
}

StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " file '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string pem = buffer.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " file '", path, "' holds no PEM block"));
  }
  return pem;
}

Status ValidateTlsOptions(const TlsOptions& tls, bool serving) {
  if (!tls.enabled()) {
    if (tls.require_client_cert) {
      return absl::InvalidArgumentError("--tls-require-client-cert needs --tls-ca and --tls-cert");
    }
    return absl::OkStatus();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (serving && tls.cert_file.empty()) {
    return absl::InvalidArgumentError("a TLS server needs --tls-cert and --tls-key");
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError("--tls-require-client-cert needs --tls-ca");
  }
  if (!tls.cert_file.empty()) {
    RETURN_IF_ERROR(ReadPemFile(tls.cert_file, "--tls-cert").status());
    RETURN_IF_ERROR(ReadPemFile(tls.key_file, "--tls-key").status());
  }
  if (!tls.ca_file.empty()) {
    RETURN_IF_ERROR(ReadPemFile(tls.ca_file, "--tls-ca").status());
  }
  return absl::OkStatus();
}

}  // namespace pdspark::security
