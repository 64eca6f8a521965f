#include "kernels/cpu/mxint8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/quant_gemm.h"

namespace pdspark::kernels::cpu {
namespace {

// The E8M0 code of the smallest power of two 2^e with |v| * 64 / 2^e <= 127 for every v of a
// group whose largest magnitude is `amax` (> 0); clamped to the codes E8M0 has (0 is 2^-127).
uint8_t GroupScaleCode(float amax) {
  int e = std::ilogb(amax);  // amax in [2^e, 2^(e+1)): amax * 64 / 2^e in [64, 128)
  if (std::ldexp(amax, 6 - e) > 127.0f) ++e;
  return static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
}

void QuantizeGroup(const float* v, int64_t n, int8_t* codes, uint8_t* scale) {
  float amax = 0;
  for (int64_t p = 0; p < n; ++p) amax = std::max(amax, std::abs(v[p]));
  *scale = amax > 0 ? GroupScaleCode(amax) : 0;
  // Dividing by 2^(code-127) * 2^-6 is a multiply by a power of two (exact but for underflow).
  const int shift = 6 - (static_cast<int>(*scale) - 127);
  if (shift < -126 || shift > 127) {  // 2^shift is no normal float (groups below 2^-121)
    for (int64_t p = 0; p < n; ++p) {
      const float code = std::nearbyint(std::ldexp(v[p], shift));
      codes[p] = static_cast<int8_t>(std::clamp(code, -127.0f, 127.0f));
    }
    return;
  }
  // The same codes in a loop the compiler vectorises (the calls above took 11 s for the head of
  // the real-dimension checkpoint): v * 2^shift is ldexp(v, shift), one rounding either way, and
  // within +-127; adding and taking away 1.5 * 2^23 rounds it half to even, as nearbyint does.
  const float factor = std::ldexp(1.0f, shift), round = 12582912.0f;
  for (int64_t p = 0; p < n; ++p) {
    const float code = (v[p] * factor + round) - round;
    codes[p] = static_cast<int8_t>(std::clamp(code, -127.0f, 127.0f));
  }
}

}  // namespace

void QuantizeRowsToMxInt8(const WeightMatrix& w, int64_t begin, int64_t end, int8_t* codes,
                          uint8_t* scales) {
  const int64_t groups = MxInt8ScalesPerRow(w.cols);
  std::vector<float> row(w.cols);
  for (int64_t j = begin; j < end; ++j) {
    DequantizeRows(w, j, j + 1, row.data());
    int8_t* row_codes = codes + (j - begin) * w.cols;
    uint8_t* row_scales = scales + (j - begin) * groups;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t p = g * kMxInt8ScaleBlock;
      QuantizeGroup(row.data() + p, std::min(kMxInt8ScaleBlock, w.cols - p), row_codes + p,
                    row_scales + g);
    }
  }
}

WeightMatrix RequantiseToMxInt8(const WeightMatrix& w, int8_t* codes, uint8_t* scales) {
  QuantizeRowsToMxInt8(w, 0, w.rows, codes, scales);
  WeightMatrix q;
  q.format = WeightFormat::kMxInt8;
  q.data = codes;
  q.row_stride = w.cols;
  q.rows = w.rows;
  q.cols = w.cols;
  q.scales = scales;
  q.scale_stride = MxInt8ScalesPerRow(w.cols);
  return q;
}

}  // namespace pdspark::kernels::cpu
