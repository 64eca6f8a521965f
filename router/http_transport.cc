#include "router/http_transport.h"

#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "common/base/logging.h"
#include "router/openai_protocol.h"

namespace pdspark::router {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Steady = std::chrono::steady_clock;

constexpr size_t kWatchBytes = 4096;
// Bytes of a pipelined next request buffered while an answer is pending; beyond this the
// connection stops reading (and so stops noticing a hang-up) until the answer is done.
constexpr size_t kMaxBufferedAhead = 64u << 10;
constexpr std::chrono::seconds kLingerTimeout{2};

struct Shared {
  HttpTransport::Options options;
  HttpHandler handler;
  std::optional<net::ssl::context> ssl;
  // Connections with an answer not yet fully written: Stop lets them finish first.
  std::atomic<int> answering{0};
};

std::string FormatHead(const HttpResponse& r, bool chunked, bool keep_alive) {
  std::string head = absl::StrCat("HTTP/1.1 ", r.status, " ",
                                  std::string(http::obsolete_reason(http::int_to_status(r.status))),
                                  "\r\nContent-Type: ", r.content_type, "\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else {
    absl::StrAppend(&head, "Content-Length: ", r.body.size(), "\r\n");
  }
  if (!keep_alive) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

HttpResponse ErrorResponse(int status, std::string message, std::string code) {
  HttpResponse response;
  response.status = status;
  response.body =
      FormatErrorBody(ApiError{status, std::move(message), "invalid_request_error", "", code});
  return response;
}

// One client connection; Stream is a TCP socket or a TLS stream over one. Its own operations
// run on the socket's strand; the HttpExchange methods may be called from any thread.
template <typename Stream>
class Connection final : public HttpExchange,
                         public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  Connection(tcp::socket socket, Shared& shared)
      : stream_(MakeStream(std::move(socket), shared)),
        shared_(shared),
        deadline_(stream_.get_executor()) {}
  ~Connection() override { SetAnswering(false); }

  void Start() {
    beast::error_code ec;
    remote_addr_ = Socket().remote_endpoint(ec).address().to_string();
    if constexpr (kTls) {
      ArmDeadline(shared_.options.idle_timeout);
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                self->deadline_.cancel();
                                if (ec) return self->Close();
                                self->ReadRequest();
                              });
    } else {
      ReadRequest();
    }
  }

  // HttpExchange, from any thread.
  void Reply(HttpResponse response) override {
    Enqueue(FormatHead(response, false, keep_alive_) + response.body, /*last=*/true);
  }
  void BeginStream(HttpResponse head) override {
    Enqueue(FormatHead(head, true, keep_alive_), /*last=*/false);
  }
  void EndStream() override { Enqueue("0\r\n\r\n", /*last=*/true); }
  bool Write(std::string bytes) override {
    if (bytes.empty()) return !Gone();
    return Enqueue(absl::StrCat(absl::Hex(bytes.size()), "\r\n", bytes, "\r\n"), false);
  }
  bool Gone() const override { return gone_.load(); }
  void WhenWritable(std::function<void()> ready) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!gone_ && pending_bytes_ > shared_.options.max_pending_bytes) {
        ready_ = std::move(ready);
        return;
      }
    }
    ready();
  }

 private:
  static Stream MakeStream(tcp::socket socket, Shared& shared) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *shared.ssl);
    } else {
      return std::move(socket);
    }
  }
  tcp::socket& Socket() { return beast::get_lowest_layer(stream_); }

  // Past `timeout` the read side is shut, so a pending read ends (as end of stream) while the
  // connection can still answer.
  void ArmDeadline(Steady::duration timeout) {
    deadline_.expires_after(timeout);
    deadline_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled or re-armed
      beast::error_code ignored;
      self->Socket().shutdown(tcp::socket::shutdown_receive, ignored);
    });
  }

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(shared_.options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(shared_.options.max_header_bytes));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = false;
    }
    ArmDeadline(shared_.options.idle_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    deadline_.cancel();
    if (ec) return OnReadError(ec);
    ArmDeadline(shared_.options.body_timeout);
    auto read_body = [self = this->shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code ec, size_t) {
                         self->deadline_.cancel();
                         if (ec) return self->OnReadError(ec);
                         self->Dispatch();
                       });
    };
    // curl and others wait for this before they send a large body.
    if (!parser_->is_done() &&
        beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = this->shared_from_this(), read_body](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         read_body();
                       });
      return;
    }
    read_body();
  }

  void OnReadError(beast::error_code ec) {
    const bool http_error =
        &ec.category() == &http::make_error_code(http::error::end_of_stream).category();
    // Closed between requests, or a socket error: nobody to answer.
    if (ec == http::error::end_of_stream || !http_error) return Close();
    keep_alive_ = false;
    SetAnswering(true);
    if (ec == http::error::body_limit) {
      return Reply(
          ErrorResponse(413, "the request body exceeds the size limit", "request_too_large"));
    }
    if (ec == http::error::header_limit) {
      return Reply(ErrorResponse(431, "the request headers exceed the size limit",
                                 "request_headers_too_large"));
    }
    if (ec == http::error::partial_message) {
      // The client stopped sending (or half-closed) before the end of the request.
      return Reply(ErrorResponse(400,
                                 "the HTTP request could not be read: it ended (or stalled) "
                                 "before its announced Content-Length",
                                 "incomplete_request"));
    }
    Reply(ErrorResponse(400, absl::StrCat("the HTTP request could not be read: ", ec.message()),
                        "malformed_request"));
  }

  void Dispatch() {
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    const std::string target(message.target());
    request.path = target.substr(0, target.find('?'));
    request.body = std::move(message.body());
    request.remote_addr = remote_addr_;
    for (const auto& field : message) {
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    SetAnswering(true);
    Watch();
    shared_.handler(request, this->shared_from_this());
  }

  // A read kept pending while an answer is: it ends when the client hangs up (or sends its
  // next request, which stays in the buffer).
  void Watch() {
    if (watching_ || buffer_.size() > kMaxBufferedAhead) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(kWatchBytes),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->OnWatched(ec, n);
                            });
  }

  void OnWatched(beast::error_code ec, size_t n) {
    watching_ = false;
    if (ec) {
      MarkGone();
      if (!answering_) Close();
      return;
    }
    buffer_.commit(n);
    if (answering_) return Watch();
    deadline_.cancel();
    ReadRequest();  // the answer is out; this was the next request
  }

  bool Enqueue(std::string bytes, bool last) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) return false;
      if (last) ended_ = true;
      if (!gone_) {
        pending_bytes_ += bytes.size();
        out_.push_back(std::move(bytes));
      }
    }
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Flush(); });
    return !gone_;
  }

  void Flush() {
    if (writing_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out_.empty()) {
        if (ended_ && answering_) {
          SetAnswering(false);
          net::post(stream_.get_executor(),
                    [self = this->shared_from_this()] { self->AnswerDone(); });
        }
        return;
      }
      writing_bufs_.assign(std::make_move_iterator(out_.begin()),
                           std::make_move_iterator(out_.end()));
      out_.clear();
    }
    writing_ = true;
    std::vector<net::const_buffer> buffers;
    for (const std::string& b : writing_bufs_) buffers.push_back(net::buffer(b));
    net::async_write(stream_, buffers,
                     [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                       self->OnWritten(ec, n);
                     });
  }

  void OnWritten(beast::error_code ec, size_t written) {
    writing_ = false;
    writing_bufs_.clear();
    std::function<void()> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_bytes_ -= std::min(pending_bytes_, written);
      if (ec) {
        gone_ = true;
        out_.clear();
        pending_bytes_ = 0;
      }
      if (ready_ && (gone_ || pending_bytes_ <= shared_.options.max_pending_bytes)) {
        ready = std::exchange(ready_, {});
      }
    }
    if (ready) ready();
    if (ec) {
      SetAnswering(false);
      return Close();
    }
    Flush();
  }

  // The whole answer is written (or the client is gone): the next request, or the end.
  void AnswerDone() {
    if (gone_ || !keep_alive_) return Linger();
    if (watching_) {
      // The watch read waits for the next request; it ends on the idle timeout.
      ArmDeadline(shared_.options.idle_timeout);
      return;
    }
    ReadRequest();
  }

  void SetAnswering(bool on) {
    if (answering_ == on) return;
    answering_ = on;
    shared_.answering += on ? 1 : -1;
  }

  void MarkGone() {
    std::function<void()> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
      ready = std::exchange(ready_, {});
    }
    if (ready) ready();
  }

  // Closes after the client has seen the answer: shut the sending side, then read (and drop)
  // whatever it still sends until it closes too, so an unread request body does not turn the
  // close into a reset that destroys the answer.
  void Linger() {
    if (closed_) return;
    beast::error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (watching_) return;  // its end closes the connection (answering_ is false)
    ArmDeadline(kLingerTimeout);
    Drop();
  }
  void Drop() {
    Socket().async_read_some(net::buffer(drop_buffer_),
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) return self->Close();
                               self->Drop();
                             });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    deadline_.cancel();
    MarkGone();
    beast::error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_both, ignored);
    Socket().close(ignored);
  }

  Stream stream_;
  Shared& shared_;
  net::steady_timer deadline_;
  std::string remote_addr_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  // On the strand only.
  bool keep_alive_ = true;
  bool answering_ = false;  // a request is being answered
  bool watching_ = false;
  bool writing_ = false;
  bool closed_ = false;
  std::vector<std::string> writing_bufs_;
  std::array<char, 4096> drop_buffer_;
  // Shared with the threads that answer.
  std::mutex mu_;
  std::deque<std::string> out_;
  size_t pending_bytes_ = 0;
  bool ended_ = false;  // the answer's last bytes are queued
  std::atomic<bool> gone_{false};
  std::function<void()> ready_;
};

}  // namespace

const std::string* HttpRequest::Find(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (beast::iequals(key, beast::string_view(name.data(), name.size()))) return &value;
  }
  return nullptr;
}

std::string HttpRequest::Header(std::string_view name) const {
  const std::string* value = Find(name);
  return value != nullptr ? *value : "";
}

struct HttpTransport::Impl {
  Shared shared;
  net::io_context io;
  tcp::acceptor acceptor{io};
  net::steady_timer accept_retry{io};
  std::vector<std::thread> threads;
  int port = 0;

  void Accept() {
    acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of file descriptors, most likely: try again shortly rather than spin.
        LOG_WARN("http accept failed error={}", ec.message());
        accept_retry.expires_after(std::chrono::milliseconds(50));
        accept_retry.async_wait([this](beast::error_code e) {
          if (!e) Accept();
        });
        return;
      }
      socket.set_option(tcp::no_delay(true), ec);
      if (shared.ssl) {
        std::make_shared<Connection<net::ssl::stream<tcp::socket>>>(std::move(socket), shared)
            ->Start();
      } else {
        std::make_shared<Connection<tcp::socket>>(std::move(socket), shared)->Start();
      }
      Accept();
    });
  }
};

HttpTransport::HttpTransport(Options options, HttpHandler handler) : impl_(new Impl) {
  impl_->shared.options = std::move(options);
  impl_->shared.handler = std::move(handler);
}

HttpTransport::~HttpTransport() { Stop(); }

int HttpTransport::port() const { return impl_->port; }

Status HttpTransport::Start() {
  const Options& o = impl_->shared.options;
  if (!o.tls.cert_file.empty()) {
    auto& ssl = impl_->shared.ssl.emplace(net::ssl::context::tls_server);
    beast::error_code ec;
    ssl.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                    net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                    net::ssl::context::no_tlsv1_1);
    ssl.use_certificate_chain_file(o.tls.cert_file, ec);
    if (!ec) ssl.use_private_key_file(o.tls.key_file, net::ssl::context::pem, ec);
    // Client certificates are checked only when required, so plain HTTPS clients (curl,
    // OpenAI SDKs) can connect otherwise.
    if (!ec && o.tls.require_client_cert && !o.tls.ca_file.empty()) {
      ssl.load_verify_file(o.tls.ca_file, ec);
      ssl.set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
    }
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot start HTTPS with --tls-cert '", o.tls.cert_file, "', --tls-key '",
                       o.tls.key_file, "'", o.tls.require_client_cert ? " and --tls-ca '" : "",
                       o.tls.require_client_cert ? o.tls.ca_file + "'" : "",
                       ": unreadable or mismatched PEM files (", ec.message(), ")"));
    }
  }
  beast::error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(o.host, std::to_string(o.port), ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve the HTTP host '", o.host, "': ", ec.message()));
  }
  const tcp::endpoint endpoint = *endpoints.begin();
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind HTTP ", o.host, ":", o.port, ": ", ec.message()));
  }
  impl_->port = acceptor.local_endpoint().port();
  impl_->Accept();
  for (int i = 0; i < std::max(1, o.threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->io.run(); });
  }
  return absl::OkStatus();
}

void HttpTransport::Stop() {
  if (impl_->threads.empty()) return;
  net::post(impl_->io, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  // Answers being written (a cancelled request's last bytes) get a moment to reach their client.
  const auto until = Steady::now() + std::chrono::seconds(2);
  while (impl_->shared.answering.load() > 0 && Steady::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->io.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace pdspark::router
