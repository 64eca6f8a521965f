#include "common/worker/worker_http_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "common/metrics/metrics.h"

namespace pdspark::worker {

StatusOr<std::unique_ptr<WorkerHttpServer>> WorkerHttpServer::Start(
    const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
    prometheus::Labels process_labels, std::function<bool()> ready) {
  std::unique_ptr<WorkerHttpServer> server(new WorkerHttpServer);
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  http.Get("/metrics", [registry, labels = std::move(process_labels)](const httplib::Request&,
                                                                      httplib::Response& res) {
    res.set_content(metrics::Serialize(*registry, labels), "text/plain; version=0.0.4");
  });
  http.Get("/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  http.Get("/ready", [ready](const httplib::Request&, httplib::Response& res) {
    const bool ok = ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ready\n" : "not ready\n", "text/plain");
  });
  server->port_ =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port));
  }
  server->thread_ = std::thread([&http] { http.listen_after_bind(); });
  return server;
}

WorkerHttpServer::~WorkerHttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pdspark::worker
