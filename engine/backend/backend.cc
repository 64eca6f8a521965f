#include "engine/backend/backend.h"

namespace pdspark::engine::backend {

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

}  // namespace pdspark::engine::backend
