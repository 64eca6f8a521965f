#include "router/rate_limiter.h"

#include <algorithm>

namespace pdspark::router {

RateLimiter::RateLimiter(Options options) : options_(options) {
  if (options_.per_client_burst <= 0)
    options_.per_client_burst = std::max(1.0, options_.per_client_rps);
  if (options_.global_burst <= 0) options_.global_burst = std::max(1.0, options_.global_rps);
  global_.tokens = options_.global_burst;
  global_.last = last_prune_ = std::chrono::steady_clock::now();
}

bool RateLimiter::Take(Bucket& bucket, double rate, double burst,
                       std::chrono::steady_clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - bucket.last).count();
  bucket.tokens = std::min(burst, bucket.tokens + elapsed * rate);
  bucket.last = now;
  if (bucket.tokens < 1.0) return false;
  bucket.tokens -= 1.0;
  return true;
}

RateLimiter::Verdict RateLimiter::Acquire(const std::string& client) {
  if (!enabled()) return Verdict::kAllowed;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.per_client_rps > 0) {
    // Full buckets carry no state worth keeping: drop them now and then so a scan of many
    // source addresses cannot grow the map without bound.
    if (now - last_prune_ > std::chrono::seconds(10) || clients_.size() > 100000) {
      for (auto it = clients_.begin(); it != clients_.end();) {
        const double idle = std::chrono::duration<double>(now - it->second.last).count();
        if (it->second.tokens + idle * options_.per_client_rps >= options_.per_client_burst) {
          it = clients_.erase(it);
        } else {
          ++it;
        }
      }
      last_prune_ = now;
    }
    auto [it, fresh] = clients_.try_emplace(client);
    if (fresh) it->second = Bucket{options_.per_client_burst, now};
    if (!Take(it->second, options_.per_client_rps, options_.per_client_burst, now)) {
      return Verdict::kClientLimited;
    }
  }
  if (options_.global_rps > 0 && !Take(global_, options_.global_rps, options_.global_burst, now)) {
    return Verdict::kGlobalLimited;
  }
  return Verdict::kAllowed;
}

std::string RateLimiter::ClientKey(const std::string& peer) {
  std::string s = peer;
  for (const char* prefix : {"ipv4:", "ipv6:", "unix:"}) {
    if (s.rfind(prefix, 0) == 0) {
      s = s.substr(std::char_traits<char>::length(prefix));
      const size_t colon = s.rfind(':');
      if (colon != std::string::npos && s.find(']') != std::string::npos) {
        s = s.substr(0, colon);  // [::1]:port
        if (s.size() >= 2 && s.front() == '[') s = s.substr(1, s.size() - 2);
      } else if (colon != std::string::npos && std::string(prefix) == "ipv4:") {
        s = s.substr(0, colon);
      }
      break;
    }
  }
  return s;
}

}  // namespace pdspark::router
