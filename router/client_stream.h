// The client's end of one HTTP exchange, as a generation sees it: whether the client is still
// there, and (for SSE) a byte stream with backpressure. Every method is safe to call from any
// thread and none blocks.
#pragma once

#include <functional>
#include <string>

namespace pdspark::router {

class ClientStream {
 public:
  virtual ~ClientStream() = default;
  // True once the client has hung up.
  virtual bool Gone() const = 0;
  // Queues `bytes` for the client; false when it is gone.
  virtual bool Write(std::string bytes) = 0;
  // Calls `ready` once little of what was written is still waiting for the client, or when the
  // client is gone (StreamObserver::WhenWritable).
  virtual void WhenWritable(std::function<void()> ready) = 0;
};

}  // namespace pdspark::router
