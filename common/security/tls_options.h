// TLS settings shared by every pdspark binary (router, prefill and decode workers): one set of
// PEM files per process. The process's certificate is both its server identity and, on the
// links it opens (worker -> router registry, router -> worker), its client identity, so with
// a CA on both ends every gRPC link is mutually authenticated. No flags: plaintext, as before.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "common/base/status.h"

namespace pdspark::security {

struct TlsOptions {
  std::string cert_file;  // PEM certificate chain presented to peers
  std::string key_file;   // PEM private key of cert_file
  std::string ca_file;    // PEM CA bundle that peers' certificates must chain to
  // Servers refuse clients without a certificate signed by ca_file (mutual TLS).
  bool require_client_cert = false;
  // Name checked against the peer's certificate instead of the host in the address (a
  // certificate issued for a DNS name while peers are dialled by IP).
  std::string server_name;

  // TLS is on for this process once it has a certificate or a CA.
  bool enabled() const { return !cert_file.empty() || !ca_file.empty(); }
};

// --tls-cert, --tls-key, --tls-ca, --tls-require-client-cert, --tls-server-name.
void AddTlsFlags(CLI::App& app, TlsOptions& tls);

// Checks that the combination is usable and the files are readable, naming the problem.
Status ValidateTlsOptions(const TlsOptions& tls, bool serving);

// The whole file, or NotFound naming it.
StatusOr<std::string> ReadPemFile(const std::string& path, const char* what);

}  // namespace pdspark::security
