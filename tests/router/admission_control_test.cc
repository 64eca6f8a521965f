#include "router/admission_control.h"

#include "gtest/gtest.h"

namespace pdspark::router {
namespace {

TEST(AdmissionControlTest, BoundsInFlightAndReleasesOnDestroy) {
  AdmissionController a(2);
  auto t1 = a.TryAdmit();
  auto t2 = a.TryAdmit();
  ASSERT_NE(t1, nullptr);
  ASSERT_NE(t2, nullptr);
  EXPECT_EQ(a.TryAdmit(), nullptr);
  EXPECT_EQ(a.in_flight(), 2u);
  t1.reset();
  EXPECT_NE(a.TryAdmit(), nullptr);  // admitted and released at once
  EXPECT_EQ(a.in_flight(), 1u);
}

}  // namespace
}  // namespace pdspark::router
