#include "kernels/weight_matrix.h"

namespace pdspark::kernels {

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "F32";
    case WeightFormat::kBF16:
      return "BF16";
    case WeightFormat::kFp8E4M3:
      return "F8_E4M3";
    case WeightFormat::kFp4E2M1:
      return "FP4_E2M1";
    case WeightFormat::kMxInt8:
      return "MXINT8";
  }
  return "?";
}

int64_t WeightMatrix::Bytes() const {
  const int64_t n = rows * cols;
  switch (format) {
    case WeightFormat::kF32:
      return 4 * n;
    case WeightFormat::kBF16:
      return 2 * n;
    case WeightFormat::kFp8E4M3:
      return n + ((rows + kFp8ScaleBlock - 1) / kFp8ScaleBlock) *
                     ((cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
    case WeightFormat::kFp4E2M1:
      return n / 2 + rows * ((cols + kFp4ScaleBlock - 1) / kFp4ScaleBlock);
    case WeightFormat::kMxInt8:
      return n + rows * ((cols + kMxInt8ScaleBlock - 1) / kMxInt8ScaleBlock);
  }
  return 0;
}

}  // namespace pdspark::kernels
