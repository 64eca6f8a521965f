// A TCP port on 127.0.0.1 that is free at the time of the call, for processes a tool or a
// benchmark starts itself (another process may still take it before they bind it).
#pragma once

namespace pdspark {

int FreeLoopbackPort();

}  // namespace pdspark
