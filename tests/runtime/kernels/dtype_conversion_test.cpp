// The CPU kernels' bf16 / fp16 conversions (kernels/cpu/tile.h) against c10's reference types:
// every 16-bit pattern widens identically, and narrowing rounds to nearest even like c10 for
// random floats, halfway ties, subnormals, overflow and specials.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kernels/cpu/tile.h"

namespace linac::kernels::cpu {
namespace {

bool sameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(DTypeConversion, WideningMatchesC10ForEveryPattern) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t pattern = uint16_t(bits);
    ASSERT_TRUE(sameFloat(bf16ToFloat(pattern), float(c10::BFloat16(pattern, c10::BFloat16::from_bits()))))
        << "bf16 pattern " << bits;
    ASSERT_TRUE(sameFloat(halfToFloat(pattern), float(c10::Half(pattern, c10::Half::from_bits()))))
        << "fp16 pattern " << bits;
  }
}

TEST(DTypeConversion, NarrowingRoundsToNearestEvenLikeC10) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f,
                               5.9604645e-8f, 2.9802322e-8f, 8.940697e-8f, 6.1035156e-5f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min()};
  // Exact halfway points between neighbouring bf16 / fp16 values (ties go to even).
  for (uint32_t m = 0; m < 64; ++m) {
    values.push_back(std::bit_cast<float>(0x3f800000u | (m << 16) | 0x8000u));  // bf16 ties
    values.push_back(std::bit_cast<float>(0x3f800000u | (m << 13) | 0x1000u));  // fp16 ties
  }
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    const float value = std::bit_cast<float>(any_bits(rng));
    if (!std::isnan(value)) values.push_back(value);
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) values.push_back(normal(rng) * std::ldexp(1.0f, int(i % 60) - 40));
  for (float value : values) {
    ASSERT_EQ(floatToBf16(value), c10::BFloat16(value).x) << "value " << value;
    ASSERT_EQ(floatToHalf(value), c10::Half(value).x) << "value " << value;
  }
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace linac::kernels::cpu
