// The KV pool's lease ledger: leases never exceed the capacity, grow only into free bytes, and
// return their bytes when released, destroyed or overwritten, exactly once.
#include "engine/serving/cache_ledger.h"

#include <memory>
#include <utility>

#include "gtest/gtest.h"

namespace pdspark::serving {
namespace {

TEST(CacheLedgerTest, LeasesFitTheCapacityAndReturnOnce) {
  auto ledger = std::make_shared<CacheLedger>(100);
  auto a = ledger->TryLease(60);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(ledger->TryLease(41).has_value());
  auto b = ledger->TryLease(40);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(ledger->leased(), 100);
  EXPECT_FALSE(b->Grow(1));
  EXPECT_EQ(b->bytes(), 40);
  {
    CacheLease moved = std::move(*a);  // the bytes move with it, not twice
    EXPECT_EQ(a->bytes(), 0);
    EXPECT_EQ(ledger->leased(), 100);
  }
  EXPECT_EQ(ledger->leased(), 40);
  a.reset();  // the moved-from lease returns nothing
  EXPECT_EQ(ledger->leased(), 40);
  EXPECT_TRUE(b->Grow(50));
  EXPECT_EQ(b->bytes(), 90);
  b->Release();
  b->Release();
  EXPECT_EQ(ledger->leased(), 0);
}

TEST(CacheLedgerTest, AssigningOverALeaseReturnsItsBytes) {
  auto ledger = std::make_shared<CacheLedger>(100);
  CacheLease lease = std::move(*ledger->TryLease(30));
  lease = std::move(*ledger->TryLease(50));
  EXPECT_EQ(ledger->leased(), 50);
  CacheLease empty;
  EXPECT_FALSE(empty.Grow(1));  // not drawn from any ledger
}

}  // namespace
}  // namespace pdspark::serving
