#include "engine/serving/cache_ledger.h"

namespace pdspark::serving {

CacheLease& CacheLease::operator=(CacheLease&& other) noexcept {
  if (this != &other) {
    Release();
    ledger_ = std::move(other.ledger_);
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

bool CacheLease::Grow(int64_t bytes) {
  if (!ledger_ || !ledger_->Take(bytes)) return false;
  bytes_ += bytes;
  return true;
}

void CacheLease::Release() {
  if (ledger_) ledger_->Return(bytes_);
  ledger_.reset();
  bytes_ = 0;
}

std::optional<CacheLease> CacheLedger::TryLease(int64_t bytes) {
  if (!Take(bytes)) return std::nullopt;
  return CacheLease(shared_from_this(), bytes);
}

int64_t CacheLedger::leased() const {
  std::lock_guard lock(mutex_);
  return leased_;
}

bool CacheLedger::Take(int64_t bytes) {
  std::lock_guard lock(mutex_);
  if (leased_ + bytes > capacity_) return false;
  leased_ += bytes;
  return true;
}

void CacheLedger::Return(int64_t bytes) {
  std::lock_guard lock(mutex_);
  leased_ -= bytes;
}

}  // namespace pdspark::serving
