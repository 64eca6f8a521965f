#include "common/base/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace pdspark {
namespace {

// Binds 127.0.0.1:port (0: any) and returns the port bound, or 0 when the bind fails.
int BindLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return bound ? ntohs(addr.sin_port) : 0;
}

}  // namespace

std::pair<int, int> EphemeralPortRange() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && 0 < low && low <= high) return {low, high};
  return {32768, 60999};
}

int FreeLoopbackPort() {
  constexpr int kLowest = 10000;
  const auto [low, high] = EphemeralPortRange();
  const bool below = low - kLowest >= 1000;
  std::uniform_int_distribution<int> pick(below ? kLowest : high + 1, below ? low - 1 : 65535);
  // Not one handed out before: the process it went to may not have bound it yet.
  static std::mutex mu;
  static std::set<int> handed_out;
  static std::mt19937 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(rng);
    if (!handed_out.contains(port) && BindLoopback(port) == port) {
      handed_out.insert(port);
      return port;
    }
  }
  return BindLoopback(0);
}

}  // namespace pdspark
