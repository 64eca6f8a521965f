// FreeLoopbackPort: ports that can be bound, outside the kernel's ephemeral range (from which an
// outgoing connection could take the port before the process it is meant for binds it).
#include "common/base/free_port.h"

#include <set>

#include "gtest/gtest.h"

namespace pdspark {
namespace {

TEST(FreeLoopbackPortTest, PortsLieOutsideTheEphemeralRange) {
  const auto [low, high] = EphemeralPortRange();
  std::set<int> ports;
  for (int i = 0; i < 100; ++i) {
    const int port = FreeLoopbackPort();
    EXPECT_GT(port, 0);
    EXPECT_FALSE(low <= port && port <= high) << port << " in " << low << "-" << high;
    ports.insert(port);
  }
  EXPECT_EQ(ports.size(), 100u);  // never one handed out before
}

}  // namespace
}  // namespace pdspark
