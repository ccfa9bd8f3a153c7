// sampler: the libm-free logarithm, the exponential gaps' mean, and the
// probability that an allocation of s bytes is sampled (1 - exp(-s/T)),
// which is what retain-diff's scaling assumes.
#include "record/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/thread_state.h"

namespace retain::shim {
namespace {

TEST(SamplerTest, NaturalLogMatchesLibm) {
  for (double x : {1e-300, 1e-16, 1e-6, 0.001, 0.1, 0.25, 0.5, 0.70710678, 0.7071068, 0.9, 1.0}) {
    EXPECT_NEAR(NaturalLog(x), std::log(x), 1e-6 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
}

TEST(SamplerTest, ExponentialGapsHaveTheMean) {
  uint64_t state = 12345;
  constexpr int kDraws = 200000;
  double sum = 0;
  for (int i = 0; i < kDraws; ++i) sum += static_cast<double>(ExponentialGap(&state, 524288));
  EXPECT_NEAR(sum / kDraws / 524288, 1.0, 0.01);
}

TEST(SamplerTest, AnAllocationIsSampledWithProbabilityOneMinusExp) {
  ASSERT_TRUE(ConfigureSampler(65536, 99));
  for (size_t size : {size_t{64}, size_t{4096}, size_t{32768}}) {
    int sampled = 0;
    constexpr int kCalls = 400000;
    for (int i = 0; i < kCalls; ++i) sampled += ShouldRecordHeap(size) ? 1 : 0;
    const double expected = 1 - std::exp(-static_cast<double>(size) / 65536);
    EXPECT_NEAR(static_cast<double>(sampled) / kCalls, expected, expected * 0.05) << size;
  }
  EXPECT_TRUE(ShouldRecordHeap(65536));  // at least the interval: always
  EXPECT_TRUE(ShouldRecordHeap(size_t{64} << 20));
  ASSERT_TRUE(ConfigureSampler(0, 0));
  EXPECT_TRUE(ShouldRecordHeap(64));
}

// Host memory a GPU runtime takes inside one of its calls is
// gpu-driver-host, a kind retain-diff never scales: it is always recorded.
TEST(SamplerTest, InsideAGpuCallEveryAllocationIsRecorded) {
  ASSERT_TRUE(ConfigureSampler(size_t{1} << 30, 5));
  ++g_thread.gpu_depth;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(ShouldRecordHeap(64));
  --g_thread.gpu_depth;
  int sampled = 0;
  for (int i = 0; i < 1000; ++i) sampled += ShouldRecordHeap(64) ? 1 : 0;
  EXPECT_LT(sampled, 5);
  ASSERT_TRUE(ConfigureSampler(0, 0));
}

TEST(SamplerTest, FilterSaysNoOnlyForAddressesNeverInserted) {
  ASSERT_TRUE(ConfigureSampler(65536, 1));
  const uintptr_t a = 0x7f0000001000;
  EXPECT_FALSE(SampledMayContain(a));
  SampledInsert(a);
  SampledInsert(a);
  EXPECT_TRUE(SampledMayContain(a));
  SampledErase(a);
  EXPECT_TRUE(SampledMayContain(a));
  SampledErase(a);
  EXPECT_FALSE(SampledMayContain(a));
  ASSERT_TRUE(ConfigureSampler(0, 0));  // back to recording everything
}

}  // namespace
}  // namespace retain::shim
