// The 16-lane vector type of the AVX-512 GEMM tiles (quant_gemm_tiles.h documents what V
// provides): one __m512 holds the 16 lanes of the canonical dot. Included inside a namespace by
// the files that compile for AVX-512 (quant_gemm_avx512.cc, quant_gemm_bf16.cc), after their
// `#pragma GCC target` and <immintrin.h>; it includes nothing itself.
//
// FP8 E4M3 codes are widened through FP16 (the E4M3 bits shifted into an FP16 pattern give
// value / 256, exactly, subnormals included; vcvtph2ps makes that fp32), FP4 E2M1 codes through
// a 16-entry permute, BF16 by a shift.
#pragma once

struct V {
  using Vec = __m512;
  // 6 x 4 tiles: 24 accumulators, 4 weight vectors and one x vector of the 32 registers.
  static constexpr int kTileRows = 6;
  static constexpr int kTileCols = 4;
  static constexpr int kFewRows = 0;  // one tile shape for every row count
  static constexpr int kFewRowsTileCols = kTileCols;
  // LoadFp8 yields value / 256: a block's scale code becomes 256 * scale.
  static constexpr const std::array<float, 256>& kFp8Multipliers = kE8M0Times256;

  static __mmask16 Mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Fma(Vec x, Vec w, Vec acc) { return _mm512_fmadd_ps(x, w, acc); }

  static Vec LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static Vec LoadF32(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }

  static Vec WidenBf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static Vec LoadBf16(const uint16_t* p) {
    return WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Vec LoadBf16(const uint16_t* p, int n) {
    return WidenBf16(_mm256_maskz_loadu_epi16(Mask(n), p));
  }

  // s eeee mmm -> FP16 s 0eeee mmm0000000, which is value / 256 (E4M3 bias 7, FP16 bias 15,
  // and FP16's subnormals line up with E4M3's): the byte sign-extended to 16 bits and shifted
  // left by 7 has the sign in bit 15 and a stray copy in bit 14, which the mask clears. The
  // NaN codes (s 1111 111) would decode as 480: CheckWeightValues refuses weights that hold them.
  static Vec WidenFp8(__m128i codes, float multiplier) {
    const __m256i bits = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7),
                                          _mm256_set1_epi16(static_cast<short>(0xBF80)));
    return _mm512_mul_ps(_mm512_cvtph_ps(bits), _mm512_set1_ps(multiplier));
  }
  static Vec LoadFp8(const uint8_t* p, float multiplier) {
    return WidenFp8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), multiplier);
  }
  static Vec LoadFp8(const uint8_t* p, float multiplier, int n) {
    return WidenFp8(_mm_maskz_loadu_epi8(Mask(n), p), multiplier);
  }

  static Vec WidenInt8(__m128i codes, float multiplier) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)),
                         _mm512_set1_ps(multiplier));
  }
  static Vec LoadInt8(const int8_t* p, float multiplier) {
    return WidenInt8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), multiplier);
  }
  static Vec LoadInt8(const int8_t* p, float multiplier, int n) {
    return WidenInt8(_mm_maskz_loadu_epi8(Mask(n), p), multiplier);
  }

  // The 16 E2M1 values times a block's scale (each product exact, or rounded as v * s is).
  using Fp4Table = __m512;
  static Fp4Table MakeFp4Table(float scale) {
    const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                         -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(values, _mm512_set1_ps(scale));
  }
  // 8 bytes -> 16 values: byte i goes to lanes 2i and 2i+1 (vpermb), lane 2i+1 shifted right
  // by 4, and vpermps looks each lane up by its low four bits: the low nibble for element 2i,
  // the high one for 2i+1.
  static Vec WidenFp4(__m128i bytes, Fp4Table table) {
    const __m512i spread = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i lanes = _mm512_permutexvar_epi8(spread, _mm512_castsi128_si512(bytes));
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(lanes, shifts), table);
  }
  static Vec LoadFp4(const uint8_t* p, Fp4Table table) {
    return WidenFp4(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), table);
  }
  static Vec LoadFp4(const uint8_t* p, Fp4Table table, int n) {
    return WidenFp4(_mm_maskz_loadu_epi8(Mask((n + 1) / 2), p), table);
  }

  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void Store(float* p, Vec v, int n) { _mm512_mask_storeu_ps(p, Mask(n), v); }

  // ((l, l+8), (l, l+4), (l, l+2), (l, l+1)).
  static float Reduce(Vec v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm512_extractf32x8_ps(v, 1);
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};
