// FitTrend on the series the issue names, and the cases around them.
#include "tools/lib/trend.h"

#include <gtest/gtest.h>

#include <vector>

namespace retain::tool {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::vector<double> Requests(int n) {
  std::vector<double> x;
  for (int i = 0; i <= n; ++i)
    x.push_back(i);  // a snapshot before the first request, then one after each
  return x;
}

TEST(FitTrendTest, TwelveRequestsOf126MiBIsLinear) {
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back(i * 126 * kMiB);
  TrendFit fit = FitTrend(Requests(12), y);
  EXPECT_EQ(fit.verdict, Verdict::kLinear);
  EXPECT_DOUBLE_EQ(fit.slope, 126 * kMiB);
  EXPECT_DOUBLE_EQ(fit.r_squared, 1.0);
  EXPECT_DOUBLE_EQ(fit.growth, 12 * 126 * kMiB);
}

TEST(FitTrendTest, CacheCappedAt512MiBOf126MiBEntriesPlateausAt504AfterRequest4) {
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back(std::min(i, 4) * 126 * kMiB);
  TrendFit fit = FitTrend(Requests(12), y);
  EXPECT_EQ(fit.verdict, Verdict::kPlateau);
  EXPECT_DOUBLE_EQ(fit.level, 504 * kMiB);
  EXPECT_DOUBLE_EQ(fit.flat_from, 4);
}

TEST(FitTrendTest, OneTime300MiBAtRequest1IsWarmUp) {
  std::vector<double> y = {0};
  for (int i = 1; i <= 12; ++i) y.push_back(300 * kMiB);
  TrendFit fit = FitTrend(Requests(12), y);
  EXPECT_EQ(fit.verdict, Verdict::kWarmUp);
  EXPECT_DOUBLE_EQ(fit.level, 300 * kMiB);
  EXPECT_DOUBLE_EQ(fit.flat_from, 1);
}

TEST(FitTrendTest, ConstantIsFlat) {
  std::vector<double> y(13, 42 * kMiB);
  EXPECT_EQ(FitTrend(Requests(12), y).verdict, Verdict::kFlat);
}

TEST(FitTrendTest, JitterBelowTheStepIsFlat) {
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back(100 * kMiB + (i % 2) * 300);  // 300 B wobble
  EXPECT_EQ(FitTrend(Requests(12), y).verdict, Verdict::kFlat);
}

TEST(FitTrendTest, UpAndDownIsNoise) {
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back((i % 2) * 50 * kMiB);
  EXPECT_EQ(FitTrend(Requests(12), y).verdict, Verdict::kNoise);
}

TEST(FitTrendTest, SmallSteadyLeakIsStillLinear) {
  // Tracked bytes are exact: 4 KiB per request is a leak, not noise.
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back(10 * kMiB + i * 4096.0);
  TrendFit fit = FitTrend(Requests(12), y);
  EXPECT_EQ(fit.verdict, Verdict::kLinear);
  EXPECT_DOUBLE_EQ(fit.slope, 4096);
}

TEST(FitTrendTest, LeakWithEvictionNoiseIsLinear) {
  // +1 MiB per request with a cache that sometimes frees 200 KiB.
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back(i * kMiB - (i % 3 == 0 ? 200 * 1024.0 : 0));
  TrendFit fit = FitTrend(Requests(12), y);
  EXPECT_EQ(fit.verdict, Verdict::kLinear);
  EXPECT_NEAR(fit.slope, kMiB, 0.05 * kMiB);
}

TEST(FitTrendTest, LeakUnderACacheThatFilledUpIsLinearAtTheLeakRate) {
  // A total: a cache adds 256 KiB per request until request 4, a leak adds
  // 64 KiB every request. The current rate is the leak's.
  std::vector<double> y;
  for (int i = 0; i <= 20; ++i) y.push_back(std::min(i, 4) * 256 * 1024.0 + i * 64 * 1024.0);
  TrendFit fit = FitTrend(Requests(20), y);
  EXPECT_EQ(fit.verdict, Verdict::kLinear);
  EXPECT_DOUBLE_EQ(fit.slope, 64 * 1024.0);
}

TEST(FitTrendTest, RssGrowingByLessThanItsStepEachRequestIsStillLinear) {
  std::vector<double> y;
  for (int i = 0; i <= 20; ++i) y.push_back(300 * kMiB + i * 64 * 1024.0);
  TrendFit fit = FitTrend(Requests(20), y, kRssMinStep);
  EXPECT_EQ(fit.verdict, Verdict::kLinear);
  EXPECT_NEAR(fit.slope, 64 * 1024.0, 1);
}

TEST(FitTrendTest, RssUsesACoarserStep) {
  // 100 KiB of page-level wobble in RSS is noise at the RSS step (256 KiB).
  std::vector<double> y;
  for (int i = 0; i <= 12; ++i) y.push_back(500 * kMiB + (i % 2) * 100 * 1024.0);
  EXPECT_EQ(FitTrend(Requests(12), y, kRssMinStep).verdict, Verdict::kFlat);
}

}  // namespace
}  // namespace retain::tool
