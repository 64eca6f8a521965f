#include "engine/cache/kv_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "common/base/logging.h"

namespace pdspark::engine {

PageGroup::PageGroup(KvPool* pool, std::string name, int64_t row_bytes)
    : pool_(pool),
      name_(std::move(name)),
      row_bytes_(row_bytes),
      rows_per_page_(pool->page_bytes() / row_bytes) {
  // PageGeometry sizes pages for the widest row, so this is a bug, never bad input.
  if (rows_per_page_ < 1) {
    LOG_ERROR("cache group {} has rows of {} bytes, wider than a {}-byte page", name_, row_bytes_,
              pool->page_bytes());
    std::abort();
  }
}

int32_t PageGroup::Allocate(PageHolder holder) {
  int32_t page = kNoPage;
  {
    std::lock_guard lock(pool_->mutex_);
    page = pool_->TakeFreePage(holder);
    if (page != kNoPage || !pool_->reclaimer_) {
      if (page != kNoPage) Took(holder);
      return page;
    }
  }
  pool_->reclaimer_(1);
  std::lock_guard lock(pool_->mutex_);
  page = pool_->TakeFreePage(holder);
  if (page != kNoPage) Took(holder);
  return page;
}

void PageGroup::Took(PageHolder holder) {
  ++pages_in_use_;
  if (holder == PageHolder::kCache) ++reclaimable_;
}

void PageGroup::Free(int32_t page, PageHolder holder) {
  std::lock_guard lock(pool_->mutex_);
  bool freed = false;
  reclaimable_ += pool_->AddHolders(page, holder, -1, &freed);
  if (!freed) return;
  --pages_in_use_;
  pool_->free_.push_back(page);
}

void PageGroup::Share(int32_t page, PageHolder holder) {
  std::lock_guard lock(pool_->mutex_);
  reclaimable_ += pool_->AddHolders(page, holder, 1);
}

bool PageGroup::IsShared(int32_t page) const {
  std::lock_guard lock(pool_->mutex_);
  return pool_->holders_[page] > 1;
}

char* PageGroup::Row(int32_t page, int64_t index) const {
  return pool_->PageData(page) + index * row_bytes_;
}

int64_t PageGroup::pages_in_use() const {
  std::lock_guard lock(pool_->mutex_);
  return pages_in_use_;
}

void KvPool::CopyBytes(char* dst, const char* src, size_t bytes) const {
  if (bytes == 0) return;
  const std::ptrdiff_t from = src - dst;
  ForEachReplica(dst, [&](backend::Ops* ops, char* at) {
    if (ops) {
      ops->Copy(at, at + from, bytes);
    } else {
      std::memmove(at, at + from, bytes);
    }
  });
}

void KvPool::ReadBytes(void* host, const char* src, size_t bytes) const {
  if (bytes == 0) return;
  if (replicas_[0].ops) {
    replicas_[0].ops->CopyToHost(host, src, bytes);
  } else {
    std::memcpy(host, src, bytes);
  }
}

void KvPool::WriteBytes(char* dst, const void* host, size_t bytes) const {
  if (bytes == 0) return;
  ForEachReplica(dst, [&](backend::Ops* ops, char* at) {
    if (ops) {
      ops->CopyToDevice(at, host, bytes);
    } else {
      std::memcpy(at, host, bytes);
    }
  });
}

void KvPool::ZeroBytes(char* dst, size_t bytes) const {
  if (bytes == 0) return;
  ForEachReplica(dst, [&](backend::Ops* ops, char* at) {
    if (ops) {
      ops->Zero(at, bytes);
    } else {
      std::memset(at, 0, bytes);
    }
  });
}

void KvPool::AddReplica(void* memory, backend::Ops* ops) {
  replicas_.push_back({static_cast<char*>(memory), ops});
}

void KvPool::MirrorDeleter::operator()(char* p) const { munmap(p, bytes); }

void KvPool::EnableHostMirror() {
  if ((on_host() && replicas() == 1) || mirror_) return;
  const size_t bytes = static_cast<size_t>(capacity_bytes());
  if (bytes == 0) return;
  // Anonymous pages: the ones no transfer touches never become resident.
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    LOG_WARN("no host memory for the KV pool's transfer mirror ({} bytes): KV transfers fail",
             bytes);
    return;
  }
  mirror_ = std::unique_ptr<char, MirrorDeleter>(static_cast<char*>(memory), {bytes});
  const size_t chunks = (bytes + kMirrorPinChunk - 1) / kMirrorPinChunk;
  chunk_pins_.assign(chunks, ChunkPin::kUntried);
}

void KvPool::PinMirror(const char* at, size_t bytes) const {
  backend::Ops* ops = replicas_[0].ops;
  if (!mirror_ || ops == nullptr || bytes == 0) return;  // host arenas: host-to-host copies
  const int64_t offset = at - base_;
  const int64_t first = offset / kMirrorPinChunk;
  const int64_t last = (offset + static_cast<int64_t>(bytes) - 1) / kMirrorPinChunk;
  std::lock_guard<std::mutex> lock(pin_mutex_);
  for (int64_t c = first; c <= last; ++c) {
    if (chunk_pins_[c] != ChunkPin::kUntried) continue;
    const int64_t begin = c * kMirrorPinChunk;
    const size_t size = static_cast<size_t>(std::min(kMirrorPinChunk, capacity_bytes() - begin));
    const bool pinned = ops->PinHostMemory(mirror_.get() + begin, size);
    chunk_pins_[c] = pinned ? ChunkPin::kPinned : ChunkPin::kRefused;
    if (!pinned) {
      LOG_WARN(
          "cannot pin {} bytes of the KV transfer mirror: its copies to and from the device "
          "go through pageable memory (slower); raise the locked-memory limit (ulimit -l)",
          size);
    }
  }
}

int64_t KvPool::mirror_pinned_bytes() const {
  std::lock_guard<std::mutex> lock(pin_mutex_);
  int64_t pinned = 0;
  for (size_t c = 0; c < chunk_pins_.size(); ++c) {
    const int64_t begin = static_cast<int64_t>(c) * kMirrorPinChunk;
    if (chunk_pins_[c] == ChunkPin::kPinned)
      pinned += std::min(kMirrorPinChunk, capacity_bytes() - begin);
  }
  return pinned;
}

const char* KvPool::TransferAddress(const char* at) const {
  return mirror_ ? mirror_.get() + (at - base_) : at;
}

const char* KvPool::StageForTransfer(const char* at, size_t bytes) const {
  if (!mirror_) return at;
  PinMirror(at, bytes);
  char* staged = mirror_.get() + (at - base_);
  ReadBytes(staged, at, bytes);
  return staged;
}

void KvPool::LandTransfer(char* at, size_t bytes) const {
  if (!mirror_) return;
  PinMirror(at, bytes);
  WriteBytes(at, mirror_.get() + (at - base_), bytes);
}

KvPool::KvPool(void* memory, int64_t page_bytes, int64_t num_pages)
    : base_(static_cast<char*>(memory)),
      page_bytes_(page_bytes),
      num_pages_(num_pages),
      replicas_{{base_, nullptr}} {
  if (num_pages < 0 || num_pages > std::numeric_limits<int32_t>::max()) {
    LOG_ERROR("KV pool of {} pages: page ids are int32 (KvPoolPages caps the count)", num_pages);
    std::abort();
  }
  free_.reserve(num_pages);
  holders_.assign(num_pages, 0);
  cache_holders_.assign(num_pages, 0);
  // Page 0 on top of the stack: a fresh pool hands pages out from the start of the arena.
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

KvPool::~KvPool() {
  // The mirror's pinned chunks are unpinned before it is unmapped.
  for (size_t c = 0; c < chunk_pins_.size(); ++c) {
    if (chunk_pins_[c] == ChunkPin::kPinned)
      replicas_[0].ops->UnpinHostMemory(mirror_.get() + c * kMirrorPinChunk);
  }
}

PageGroup& KvPool::ForGroup(const std::string& name, int64_t row_bytes) {
  std::lock_guard lock(mutex_);
  auto& group = groups_[{name, row_bytes}];
  if (!group) group = std::make_unique<PageGroup>(this, name, row_bytes);
  return *group;
}

int32_t KvPool::TakeFreePage(PageHolder holder) {
  if (free_.empty()) return kNoPage;
  const int32_t page = free_.back();
  free_.pop_back();
  AddHolders(page, holder, 1);
  const int64_t in_use = num_pages_ - static_cast<int64_t>(free_.size());
  high_water_ = std::max(high_water_, in_use);
  return page;
}

int KvPool::AddHolders(int32_t page, PageHolder holder, int32_t delta, bool* freed) {
  const bool was_reclaimable = holders_[page] > 0 && holders_[page] == cache_holders_[page];
  holders_[page] += delta;
  if (holder == PageHolder::kCache) cache_holders_[page] += delta;
  const bool reclaimable = holders_[page] > 0 && holders_[page] == cache_holders_[page];
  const int change = static_cast<int>(reclaimable) - static_cast<int>(was_reclaimable);
  reclaimable_ += change;
  if (freed != nullptr) *freed = holders_[page] == 0;
  return change;
}

bool KvPool::EnsureFree(int64_t pages) {
  if (free_pages() >= pages) return true;
  if (reclaimer_) reclaimer_(pages);
  return free_pages() >= pages;
}

int64_t KvPool::free_pages() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_.size());
}

int64_t KvPool::pages_in_use() const {
  std::lock_guard lock(mutex_);
  return num_pages_ - static_cast<int64_t>(free_.size());
}

int64_t KvPool::reclaimable_pages() const {
  std::lock_guard lock(mutex_);
  return reclaimable_;
}

int64_t KvPool::high_water_pages() const {
  std::lock_guard lock(mutex_);
  return high_water_;
}

std::map<std::string, int64_t> KvPool::BytesInUseByGroup() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, int64_t> bytes;
  for (const auto& [key, group] : groups_) {
    bytes[key.first] += (group->pages_in_use_ - group->reclaimable_) * page_bytes_;
  }
  return bytes;
}

}  // namespace pdspark::engine
