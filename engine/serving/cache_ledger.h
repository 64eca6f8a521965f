// Admission accounting of the KV pool in one place: every request's worst-case cache (the
// serving engine's admission, and a decode worker's KV-transfer reservation before the
// request even reaches the engine) is a lease on one ledger whose capacity is the pool's size.
// The pool then never runs out: what is in use never exceeds what is leased. A lease returns
// its bytes when it is destroyed (request finished, transfer lease expired or released), on
// whatever thread that happens.
//
//   auto ledger = std::make_shared<CacheLedger>(pool.capacity_bytes());
//   std::optional<CacheLease> lease = ledger->TryLease(bytes);  // nullopt: wait or refuse
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

namespace pdspark::serving {

class CacheLedger;

class CacheLease {
 public:
  CacheLease() = default;
  CacheLease(CacheLease&& other) noexcept { *this = std::move(other); }
  CacheLease& operator=(CacheLease&& other) noexcept;
  ~CacheLease() { Release(); }

  int64_t bytes() const { return bytes_; }
  // Takes `bytes` more from the ledger; false (nothing taken) when they are not free.
  bool Grow(int64_t bytes);
  void Release();

 private:
  friend class CacheLedger;
  CacheLease(std::shared_ptr<CacheLedger> ledger, int64_t bytes)
      : ledger_(std::move(ledger)), bytes_(bytes) {}

  std::shared_ptr<CacheLedger> ledger_;
  int64_t bytes_ = 0;
};

class CacheLedger : public std::enable_shared_from_this<CacheLedger> {
 public:
  explicit CacheLedger(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // A lease of `bytes`, or nullopt when they do not fit next to the other leases.
  std::optional<CacheLease> TryLease(int64_t bytes);
  int64_t capacity() const { return capacity_; }
  int64_t leased() const;

 private:
  friend class CacheLease;
  bool Take(int64_t bytes);
  void Return(int64_t bytes);

  const int64_t capacity_;
  mutable std::mutex mutex_;
  int64_t leased_ = 0;
};

}  // namespace pdspark::serving
