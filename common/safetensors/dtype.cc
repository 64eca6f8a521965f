// The safetensors dtype strings this project reads, with their element sizes.
#include <array>

#include "common/base/strings.h"
#include "common/safetensors/safetensors.h"

namespace pdspark::safetensors {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeEntry, 11> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
}};

const DTypeEntry& Entry(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable for valid enumerators
}

}  // namespace

StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return absl::InvalidArgumentError(Cat("unknown dtype '", name, "'"));
}

std::string_view DTypeName(DType dtype) { return Entry(dtype).name; }

size_t DTypeSize(DType dtype) { return Entry(dtype).size; }

int64_t TensorView::NumElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;  // validated at Open not to overflow
  return count;
}

}  // namespace pdspark::safetensors
