#include "router/admission_control.h"

namespace pdspark::router {

std::unique_ptr<AdmissionController::Ticket> AdmissionController::TryAdmit() {
  uint32_t current = in_flight_.load();
  do {
    if (current >= max_in_flight_) return nullptr;
  } while (!in_flight_.compare_exchange_weak(current, current + 1));
  return std::make_unique<Ticket>(this);
}

}  // namespace pdspark::router
