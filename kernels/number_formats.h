// The checkpoint's number formats, decoded and rounded by functions that compile for the host
// and for CUDA devices alike (PDSPARK_HOST_DEVICE). The CPU kernels (kernels/cpu) and the CUDA
// kernels (kernels/cuda) share these definitions, so the host tests of one cover both. Every
// decode is exact: the formats widen to fp32 without rounding.
//
//   BF16        the upper half of an fp32
//   FP8 E4M3    sign, 4 exponent bits (bias 7), 3 mantissa bits; subnormals; S.1111.111 is NaN
//   FP4 E2M1    sign, 2 exponent bits (bias 1), 1 mantissa bit: 0, .5, 1, 1.5, 2, 3, 4, 6
//   E8M0        a power of two 2^(bits - 127); 0xFF is NaN
//
// Header-only and C++17 (nvcc compiles the CUDA sources as C++17).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PDSPARK_HOST_DEVICE __host__ __device__
#else
#define PDSPARK_HOST_DEVICE
#endif

namespace pdspark::kernels {

PDSPARK_HOST_DEVICE inline float FloatFromBits(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

PDSPARK_HOST_DEVICE inline float Bf16ToFloat(uint16_t bits) {
  return FloatFromBits(static_cast<uint32_t>(bits) << 16);
}

PDSPARK_HOST_DEVICE inline float Fp8E4M3ToFloat(uint8_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80) << 24;
  const uint32_t exponent = (bits >> 3) & 0xF;
  const uint32_t mantissa = bits & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return FloatFromBits(sign | 0x7FC00000u);
  if (exponent == 0) {
    // Subnormal: m/8 * 2^-6 = m * 2^-9, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return sign ? -magnitude : magnitude;
  }
  return FloatFromBits(sign | ((exponent + 120) << 23) | (mantissa << 20));  // 127 - 7 = 120
}

// Low 4 bits used.
PDSPARK_HOST_DEVICE inline float Fp4E2M1ToFloat(uint8_t nibble) {
  const uint32_t sign = static_cast<uint32_t>(nibble & 0x8) << 28;
  const uint32_t exponent = (nibble >> 1) & 0x3;
  const uint32_t mantissa = nibble & 0x1;
  if (exponent == 0) return FloatFromBits(sign | (mantissa ? 0x3F000000u : 0u));  // 0 or 0.5
  return FloatFromBits(sign | ((exponent + 126) << 23) | (mantissa << 22));       // 127 - 1
}

PDSPARK_HOST_DEVICE inline float E8M0ToFloat(uint8_t bits) {
  if (bits == 0xFF) return FloatFromBits(0x7FC00000u);
  if (bits == 0) return FloatFromBits(0x00400000u);  // 2^-127, an fp32 subnormal
  return FloatFromBits(static_cast<uint32_t>(bits) << 23);
}

// Rounds `value` half to even onto a binary minifloat grid with `mantissa_bits` explicit bits
// whose smallest normal exponent is `min_exponent` (below it the grid is uniform: subnormals;
// min_exponent - mantissa_bits >= -126, so the grid's step is a normal float). The caller clamps
// to the format's maximum first, so there is no overflow to handle. No library calls: the
// model's quantise-dequantise simulations run this on every activation (with ilogbf, ldexpf and
// rintf they took 2 % of a decode step's samples on the CPU).
PDSPARK_HOST_DEVICE inline float RoundToMiniFloat(float value, int mantissa_bits,
                                                  int min_exponent) {
  // value - value is 0 exactly for finite values (NaN for inf and NaN).
  if (!(value - value == 0.0f)) return value;
  // floor(log2|value|) from the bits; zero and subnormals read -127, below any min_exponent.
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  int exponent = static_cast<int>((bits >> 23) & 0xFF) - 127;
  if (exponent < min_exponent) exponent = min_exponent;
  // value / step, exact (a power-of-two factor), and below 2^(mantissa_bits + 1) in magnitude:
  // adding and taking away 1.5 * 2^23 rounds it half to even in the default rounding mode, as
  // rintf does, on the host as on the device; copysignf keeps the sign of a zero.
  const float steps =
      value * FloatFromBits(static_cast<uint32_t>(mantissa_bits - exponent + 127) << 23);
  const float rounded = copysignf((steps + 12582912.0f) - 12582912.0f, steps);
  return rounded * FloatFromBits(static_cast<uint32_t>(exponent - mantissa_bits + 127) << 23);
}

PDSPARK_HOST_DEVICE inline float RoundToE4M3(float value) { return RoundToMiniFloat(value, 3, -6); }
PDSPARK_HOST_DEVICE inline float RoundToE2M1(float value) { return RoundToMiniFloat(value, 1, 0); }

// ---- Encoding (the FP8 KV cache rows, kernels/cpu/fp8_kv_row.h) ------------------------------

inline constexpr float kE4M3Max = 448.0f;

// The E4M3 code of the value nearest `value` (clamped to +-448; round half to even).
PDSPARK_HOST_DEVICE inline uint8_t FloatToFp8E4M3(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  const uint8_t sign = (bits >> 31) ? 0x80 : 0x00;
  const float magnitude = RoundToE4M3(fminf(fabsf(value), kE4M3Max));
  if (magnitude < ldexpf(1.0f, -6)) {
    // Subnormal: magnitude = m / 8 * 2^-6.
    return sign | static_cast<uint8_t>(ldexpf(magnitude, 9));
  }
  const int exponent = ilogbf(magnitude);
  const int mantissa = static_cast<int>(ldexpf(magnitude, 3 - exponent)) - 8;
  return sign | static_cast<uint8_t>((exponent + 7) << 3) | static_cast<uint8_t>(mantissa);
}

// The smallest k with amax <= 448 * 2^k, within E8M0's range [-127, 127] (0 for amax 0): the
// power-of-two scale of an FP8 block whose largest magnitude is amax.
PDSPARK_HOST_DEVICE inline int Fp8ScaleExponent(float amax) {
  if (amax == 0.0f) return 0;
  int k = ilogbf(amax) - 8;
  while (amax > ldexpf(kE4M3Max, k)) ++k;
  while (amax <= ldexpf(kE4M3Max, k - 1)) --k;
  return k < -127 ? -127 : (k > 127 ? 127 : k);
}

}  // namespace pdspark::kernels
