#include "router/stop_matcher.h"

#include "gtest/gtest.h"

namespace pdspark::router {
namespace {

TEST(StopMatcherTest, NoStopsPassesThrough) {
  StopMatcher m({}, false);
  EXPECT_EQ(m.Push("abc"), "abc");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, MatchAcrossDeltasHoldsBackPrefix) {
  StopMatcher m({"END"}, false);
  EXPECT_EQ(m.Push("hello E"), "hello ");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("D tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopMatcherTest, FalseStartIsReleased) {
  StopMatcher m({"END"}, false);
  EXPECT_EQ(m.Push("xE"), "x");
  EXPECT_EQ(m.Push("Nx"), "ENx");
  EXPECT_EQ(m.Push("EN"), "");
  EXPECT_EQ(m.Flush(), "EN");
}

TEST(StopMatcherTest, EarliestOfSeveralAndIncludeStop) {
  StopMatcher m({"cd", "b"}, true);
  EXPECT_EQ(m.Push("abcd"), "ab");
  EXPECT_EQ(m.matched(), "b");
}

}  // namespace
}  // namespace pdspark::router
