// Tells whether the HTTP client of a request has hung up. cpp-httplib does not expose the
// connection's socket, so the probe finds it once by its (local, remote) address pair and then
// peeks at it: a readable socket with no data means the peer closed. It re-checks the pair on
// every probe, so a reused descriptor number is never mistaken for the client.
#pragma once

#include <string>

namespace pdspark::router {

class ConnectionProbe {
 public:
  // Finds the socket; an unfound socket makes Gone() always false (streaming writes still
  // notice a disconnect).
  ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr,
                  int remote_port);

  bool Gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  bool Matches(int fd) const;

  std::string local_addr_;
  int local_port_;
  std::string remote_addr_;
  int remote_port_;
  int fd_ = -1;
};

}  // namespace pdspark::router
