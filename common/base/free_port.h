// A TCP port on 127.0.0.1 that is free at the time of the call, for processes a tool or a
// benchmark starts itself (another process may still take it before they bind it).
#pragma once

#include <utility>

namespace pdspark {

// Drawn at random below the kernel's ephemeral range (ip_local_port_range): a port from that
// range, what a bind to port 0 gives, can be taken by any process's outgoing connection before
// the process it is meant for binds it. Never the same port twice in a process. Falls back to a
// bind to port 0 where no port below the range is free.
int FreeLoopbackPort();

// The kernel's range for the local ports of outgoing connections (Linux's default where
// /proc does not say).
std::pair<int, int> EphemeralPortRange();

}  // namespace pdspark
