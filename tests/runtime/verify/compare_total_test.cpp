// verify's measure for gradients that are totals over tokens (runtime/verify/common.cpp,
// compareTotal): the plain relative RMS when the total is well conditioned, the error relative to
// the per-token contributions' norm when they cancel, and failures still caught.
#include "verify/sections.h"

#include <gtest/gtest.h>

namespace linac::verify::detail {
namespace {

constexpr double kTol = 1e-5;

TEST(CompareTotal, WellConditionedTotalKeepsThePlainError) {
  // Same-sign contributions: ||c|| < ||sum||, so the measure is the plain rel-RMS.
  torch::Tensor c = torch::full({2, 50, 3}, 0.5, torch::kFloat64);
  torch::Tensor ref = c.sum(std::vector<int64_t>{0, 1});
  torch::Tensor x = ref * (1 + 2e-6);
  Report r;
  compareTotal(r, "kernel", "d g", "test", x, ref, c, kTol);
  ASSERT_EQ(r.checks.size(), 1u);
  EXPECT_NEAR(r.checks[0].error, 2e-6, 1e-9);
  EXPECT_TRUE(r.checks[0].passed());
}

TEST(CompareTotal, CancellingTotalIsMeasuredAgainstItsTerms) {
  // Terms of size ~1 that cancel to 1e-3: an error of 1e-8 absolute is 1e-5 of the total (the
  // plain measure fails) but 1e-8 of the terms' norm.
  torch::Tensor c = torch::zeros({1, 4, 1}, torch::kFloat64);
  c[0][0][0] = 1.0;
  c[0][1][0] = -1.0;
  c[0][2][0] = 0.5;
  c[0][3][0] = -0.5 + 1e-3;
  torch::Tensor ref = c.sum(std::vector<int64_t>{0, 1});
  torch::Tensor x = ref + 2e-8;
  Report r;
  compareTotal(r, "spec", "d A_log", "test", x, ref, c, kTol);
  const double termsNorm = c.norm().item<double>();
  EXPECT_NEAR(r.checks[0].error, 2e-8 / termsNorm, 1e-12);
  EXPECT_TRUE(r.checks[0].passed());
  EXPECT_NE(r.checks[0].note.find("plain rel-RMS 2.00e-05"), std::string::npos) << r.checks[0].note;
}

TEST(CompareTotal, AWrongTotalStillFails) {
  torch::Tensor c = torch::randn({2, 30, 4}, torch::kFloat64);
  torch::Tensor ref = c.sum(std::vector<int64_t>{0, 1});
  Report r;
  compareTotal(r, "spec", "d dt_bias", "test", ref + 0.1 * c.norm(), ref, c, kTol);
  EXPECT_FALSE(r.checks[0].passed());
  compareTotal(r, "spec", "d dt_bias", "test", torch::Tensor(), ref, c, kTol);  // no kernel value
  EXPECT_FALSE(r.checks[1].passed());
}

}  // namespace
}  // namespace linac::verify::detail
