// Errors are absl::Status / absl::StatusOr everywhere. These macros keep call sites short.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdspark {

using absl::Status;
using absl::StatusOr;

}  // namespace pdspark

#define PDSPARK_CONCAT_INNER_(a, b) a##b
#define PDSPARK_CONCAT_(a, b) PDSPARK_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::absl::Status pdspark_status_ = (expr);          \
    if (!pdspark_status_.ok()) return pdspark_status_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()): binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(PDSPARK_CONCAT_(pdspark_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
