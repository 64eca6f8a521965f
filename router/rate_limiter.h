// Token-bucket request rate limits for the client API: one bucket per client (the peer's IP
// address) and one for the whole router. A request takes one token from both; an empty bucket
// means 429 / RESOURCE_EXHAUSTED. Off (rate 0) by default.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace pdspark::router {

class RateLimiter {
 public:
  struct Options {
    double per_client_rps = 0;    // 0: no per-client limit
    double per_client_burst = 0;  // 0: max(1, per_client_rps)
    double global_rps = 0;        // 0: no global limit
    double global_burst = 0;      // 0: max(1, global_rps)
  };
  enum class Verdict { kAllowed, kClientLimited, kGlobalLimited };

  explicit RateLimiter(Options options);
  bool enabled() const { return options_.per_client_rps > 0 || options_.global_rps > 0; }
  Verdict Acquire(const std::string& client);
  // "ipv4:10.0.0.1:5555" / "ipv6:[::1]:5555" (gRPC peers) and "10.0.0.1" -> the address alone.
  static std::string ClientKey(const std::string& peer);

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  static bool Take(Bucket& bucket, double rate, double burst,
                   std::chrono::steady_clock::time_point now);

  Options options_;
  std::mutex mu_;
  Bucket global_;
  std::unordered_map<std::string, Bucket> clients_;
  std::chrono::steady_clock::time_point last_prune_;
};

}  // namespace pdspark::router
