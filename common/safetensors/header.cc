// Validation of a safetensors header: the JSON after the 8-byte length. Every rule here protects
// a later raw-pointer access, so nothing is taken on trust: dtypes, shapes, byte counts and
// offsets are checked against each other and against the real size of the data section.
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "common/base/strings.h"
#include "common/safetensors/safetensors.h"
#include "common/safetensors/strict_json.h"

namespace pdspark::safetensors {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

Status TensorError(std::string_view name, std::string_view what) {
  return absl::InvalidArgumentError(Cat("tensor '", name, "': ", what));
}

// Reads a JSON integer that must be >= 0 and at most `max`.
StatusOr<uint64_t> NonNegativeInt(const Json& value, uint64_t max, std::string_view name,
                                  std::string_view what) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v <= max) return v;
    return TensorError(name, Cat(what, " is ", v, ", too large"));
  }
  if (value.is_number_integer()) {  // signed and therefore negative
    return TensorError(name, Cat(what, " is ", value.get<int64_t>(), ", must be >= 0"));
  }
  return TensorError(name,
                     Cat(what, " must be a non-negative integer, got ",
                         value.is_number_float() ? "a fractional number" : value.type_name()));
}

StatusOr<std::vector<int64_t>> ParseShape(const Json& json, std::string_view name) {
  if (!json.is_array()) {
    return TensorError(name, Cat("shape must be a list, got ", json.type_name()));
  }
  std::vector<int64_t> shape;
  shape.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    ASSIGN_OR_RETURN(uint64_t dim, NonNegativeInt(json[i], std::numeric_limits<int64_t>::max(),
                                                  name, Cat("shape[", i, "]")));
    shape.push_back(static_cast<int64_t>(dim));
  }
  return shape;
}

// product(shape) * element_size, or an error when it does not fit in 64 bits.
StatusOr<uint64_t> ByteCount(const std::vector<int64_t>& shape, size_t element_size,
                             std::string_view name) {
  uint64_t bytes = element_size;
  for (int64_t dim : shape) {
    if (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(dim)) {
      return TensorError(name, "shape's byte size overflows 64 bits");
    }
    bytes *= static_cast<uint64_t>(dim);
  }
  // NumElements() is int64: keep the element count representable too.
  if (bytes / element_size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return TensorError(name, "shape's element count overflows 64 bits");
  }
  return bytes;
}

Status ParseOffsets(const Json& json, std::string_view name, uint64_t data_size, TensorInfo& info) {
  if (!json.is_array() || json.size() != 2) {
    return TensorError(name, "data_offsets must be a list of 2 integers");
  }
  ASSIGN_OR_RETURN(info.begin, NonNegativeInt(json[0], std::numeric_limits<uint64_t>::max(), name,
                                              "data_offsets[0]"));
  ASSIGN_OR_RETURN(info.end, NonNegativeInt(json[1], std::numeric_limits<uint64_t>::max(), name,
                                            "data_offsets[1]"));
  if (info.begin > info.end) {
    return TensorError(name, Cat("data_offsets [", info.begin, ", ", info.end, "] out of order"));
  }
  if (info.end > data_size) {
    return TensorError(name, Cat("data_offsets [", info.begin, ", ", info.end,
                                 "] past the end of the data section (", data_size, " bytes)"));
  }
  return absl::OkStatus();
}

StatusOr<TensorInfo> ParseTensor(const Json& json, std::string_view name, uint64_t data_size) {
  if (name.empty()) return TensorError(name, "empty tensor name");
  if (!json.is_object()) {
    return TensorError(name, Cat("entry must be an object, got ", json.type_name()));
  }
  for (const auto& [key, value] : json.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return TensorError(name, Cat("unexpected field '", key, "'"));
    }
  }
  for (std::string_view key : {"dtype", "shape", "data_offsets"}) {
    if (!json.contains(key)) return TensorError(name, Cat("missing field '", key, "'"));
  }
  const Json& dtype = json["dtype"];
  if (!dtype.is_string()) return TensorError(name, "dtype must be a string");
  StatusOr<DType> parsed = ParseDType(dtype.get_ref<const std::string&>());
  if (!parsed.ok()) return TensorError(name, std::string(parsed.status().message()));
  TensorInfo info;
  info.dtype = *parsed;
  ASSIGN_OR_RETURN(info.shape, ParseShape(json["shape"], name));
  RETURN_IF_ERROR(ParseOffsets(json["data_offsets"], name, data_size, info));
  ASSIGN_OR_RETURN(uint64_t bytes, ByteCount(info.shape, DTypeSize(info.dtype), name));
  if (bytes != info.end - info.begin) {
    return TensorError(name, Cat("dtype ", DTypeName(info.dtype), " shape needs ", bytes,
                                 " bytes but data_offsets [", info.begin, ", ", info.end, "] span ",
                                 info.end - info.begin));
  }
  return info;
}

Status ParseMetadata(const Json& json, std::map<std::string, std::string>& metadata) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        Cat("__metadata__ must be an object, got ", json.type_name()));
  }
  for (const auto& [key, value] : json.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          Cat("__metadata__ entry '", key, "' must be a string, got ", value.type_name()));
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return absl::OkStatus();
}

// Zero-byte tensors occupy no bytes and cannot overlap; every other pair must be disjoint.
Status CheckNoOverlap(const std::map<std::string, TensorInfo>& tensors) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> spans;
  for (const auto& [name, info] : tensors) {
    if (info.end > info.begin) spans.emplace_back(&name, &info);
  }
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto& [prev_name, prev] = spans[i - 1];
    const auto& [name, info] = spans[i];
    if (info->begin < prev->end) {
      return TensorError(*name,
                         Cat("data_offsets [", info->begin, ", ", info->end, "] overlap tensor '",
                             *prev_name, "' [", prev->begin, ", ", prev->end, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<Header> ParseHeader(std::string_view json_text, uint64_t data_size) {
  StatusOr<Json> parsed = internal::ParseStrictJson(json_text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(Cat("header: ", parsed.status().message()));
  }
  const Json& json = *parsed;
  if (!json.is_object()) {
    return absl::InvalidArgumentError(Cat("header must be a JSON object, got ", json.type_name()));
  }
  Header header;
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      RETURN_IF_ERROR(ParseMetadata(value, header.metadata));
      continue;
    }
    ASSIGN_OR_RETURN(TensorInfo info, ParseTensor(value, key, data_size));
    header.tensors.emplace(key, std::move(info));
  }
  RETURN_IF_ERROR(CheckNoOverlap(header.tensors));
  return header;
}

}  // namespace pdspark::safetensors
