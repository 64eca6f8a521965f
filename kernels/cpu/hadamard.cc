// Fast Walsh-Hadamard transform (Sylvester order, the fast_hadamard_transform convention).
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {

void HadamardTransform(float* x, int64_t n, float scale) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace pdspark::kernels::cpu
