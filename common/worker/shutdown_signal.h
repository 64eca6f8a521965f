// Blocks SIGINT/SIGTERM in every thread (call first thing in main, before threads start) and
// lets main wait for one, so shutdown runs on the main thread in a defined order.
#pragma once

#include <csignal>

namespace pdspark::worker {

inline sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Returns the signal that arrived.
inline int WaitForShutdownSignal(const sigset_t& set) {
  int signal = 0;
  sigwait(&set, &signal);
  return signal;
}

}  // namespace pdspark::worker
