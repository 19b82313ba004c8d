// Small dense helpers for the CPU kernels: element-type conversion (bf16 / fp16 / fp32 <-> fp32)
// and gathering one (sequence, head) slice of a [B, T, H, D] tensor into a contiguous fp32 tile.
// Everything here is plain C++20 with no dependency beyond the contract header.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "../common/recurrence.h"

namespace linac::kernels::cpu {

// --- scalar conversions -----------------------------------------------------------------------

/// bf16 is the top half of an IEEE fp32: widening is a shift.
inline float bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

/// fp32 -> bf16 with round-to-nearest-even; NaN stays a (quiet) NaN.
inline uint16_t floatToBf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x0040u);
  const uint32_t lsb = (bits >> 16) & 1u;  // ties go to the even neighbour
  bits += 0x7fffu + lsb;
  return uint16_t(bits >> 16);
}

/// IEEE binary16 -> fp32 (exact: every half is representable as a float).
inline float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
}

/// fp32 -> IEEE binary16 with round-to-nearest-even, overflow to inf, gradual underflow.
inline uint16_t floatToHalf(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  constexpr uint32_t kFloatInf = 0x7f800000u;
  constexpr uint32_t kHalfOverflow = 0x477ff000u;   // 65520: the first value that rounds to inf
  constexpr uint32_t kHalfMinNormal = 0x38800000u;  // 2^-14
  if (bits >= kFloatInf) return uint16_t(sign | (bits > kFloatInf ? 0x7e00u : 0x7c00u));
  if (bits >= kHalfOverflow) return uint16_t(sign | 0x7c00u);
  if (bits < kHalfMinNormal) {
    // Subnormal half: value = m * 2^-24. Scaling by 2^24 is exact; nearbyint rounds half-to-even
    // in the default rounding mode. m == 1024 correctly becomes the smallest normal (0x0400).
    const float scaled = std::bit_cast<float>(bits) * 16777216.0f;
    return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
  }
  const uint32_t lsb = (bits >> 13) & 1u;
  bits += 0xfffu + lsb;               // round the 13 dropped mantissa bits to nearest even
  bits -= uint32_t(127 - 15) << 23;   // rebias the exponent (a mantissa carry bumps it, correctly)
  return uint16_t(sign | (bits >> 13));
}

inline float loadElement(const void* base, int64_t index, DType dtype) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[index];
    case DType::BF16: return bf16ToFloat(static_cast<const uint16_t*>(base)[index]);
    case DType::F16: return halfToFloat(static_cast<const uint16_t*>(base)[index]);
  }
  return 0.0f;
}

inline void storeElement(void* base, int64_t index, DType dtype, float value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[index] = value; return;
    case DType::BF16: static_cast<uint16_t*>(base)[index] = floatToBf16(value); return;
    case DType::F16: static_cast<uint16_t*>(base)[index] = floatToHalf(value); return;
  }
}

// --- token-major slices -----------------------------------------------------------------------

/// Where one (sequence, head) lives inside a [B, T, H, D] tensor: token t of the slice is row
/// ((first_token + t) * heads + head) of the [B*T*H, D] matrix.
struct HeadSlice {
  int64_t first_token = 0;  // b * T, or cu_seqlens[n] when packed
  int64_t length = 0;       // T, or cu_seqlens[n+1] - cu_seqlens[n]
  int64_t heads = 0;
  int64_t head = 0;
  int64_t row(int64_t t) const { return (first_token + t) * heads + head; }
};

/// Gathers rows [0, slice.length) of a [B, T, H, width] tensor into out [length, width] fp32.
inline void loadRows(const void* src, DType dtype, const HeadSlice& slice, int64_t width,
                     float* out) {
  for (int64_t t = 0; t < slice.length; ++t) {
    const int64_t base = slice.row(t) * width;
    for (int64_t c = 0; c < width; ++c) out[t * width + c] = loadElement(src, base + c, dtype);
  }
}

/// Scatters in [length, width] fp32 into a [B, T, H, width] tensor of the given dtype.
inline void storeRows(void* dst, DType dtype, const HeadSlice& slice, int64_t width,
                      const float* in) {
  for (int64_t t = 0; t < slice.length; ++t) {
    const int64_t base = slice.row(t) * width;
    for (int64_t c = 0; c < width; ++c) storeElement(dst, base + c, dtype, in[t * width + c]);
  }
}

inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace linac::kernels::cpu
