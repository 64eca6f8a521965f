// The router's HTTP/1.1 transport, event-driven on Boost.Asio/Beast: a few threads serve every
// connection, so thousands of open SSE streams cost memory, not threads. A connection reads one
// request at a time (keep-alive), hands it to the handler, and writes what the handler answers,
// whole (Reply) or as a chunked stream (BeginStream, ClientStream::Write, EndStream), from any
// thread. While an answer is pending it watches the socket, so a client that hangs up is seen
// at once (ClientStream::Gone), not at the next write.
//
// Errors a client can cause before any handler runs get an OpenAI-style body: 413 (body over
// the limit), 400 (malformed, or a body that ends or stalls before its Content-Length), 431
// (headers over the limit).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/security/tls_options.h"
#include "router/client_stream.h"

namespace pdspark::router {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  std::string body;
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;

  // The first header of that name (case-insensitive), or empty.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const { return Find(name) != nullptr; }

 private:
  const std::string* Find(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// The answer to one request.
class HttpExchange : public ClientStream {
 public:
  // The whole answer.
  virtual void Reply(HttpResponse response) = 0;
  // A chunked answer: `head`'s status and headers now, the body through Write, then EndStream.
  virtual void BeginStream(HttpResponse head) = 0;
  virtual void EndStream() = 0;
};

using HttpHandler =
    std::function<void(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange)>;

class HttpTransport {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port
    int threads = 2;
    size_t max_body_bytes = 8u << 20;
    size_t max_header_bytes = 64u << 10;
    // A keep-alive connection with no request for this long is closed.
    std::chrono::milliseconds idle_timeout{60'000};
    // A request whose body has not fully arrived this long after its headers gets 400.
    std::chrono::milliseconds body_timeout{5'000};
    // Bytes queued for one client beyond which the answer waits (WhenWritable).
    size_t max_pending_bytes = 256u << 10;
    security::TlsOptions tls;  // HTTPS when tls.cert_file is set
  };

  HttpTransport(Options options, HttpHandler handler);
  ~HttpTransport();

  // Binds and starts serving on `threads` background threads.
  Status Start();
  // Stops accepting and serving; answers still pending are dropped.
  void Stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pdspark::router
