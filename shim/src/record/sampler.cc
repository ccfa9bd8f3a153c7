// sampler: see record/sampler.h.
#include "record/sampler.h"

#include <string.h>
#include <time.h>

#include <atomic>

#include "base/arena.h"

namespace retain::shim {
namespace {

constexpr size_t kFilterSize = size_t{1} << kSampledFilterBits;

uint64_t g_seed;
bool g_seed_fixed;
std::atomic<uint64_t> g_thread_ordinal;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Starts this thread's generator: from RETAIN_SAMPLE_SEED and the order in
// which threads first sampled (reproducible for a given program), else from
// the clock and the thread's stack address.
void StartThread() {
  // A thread whose allocations are sampled out records nothing, so this is
  // where the shim first sees it (base/threads.h: NoteProgramThread).
  CurrentThreadId();
  uint64_t ordinal = g_thread_ordinal.fetch_add(1, std::memory_order_relaxed);
  uint64_t state;
  if (g_seed_fixed) {
    state = Mix(g_seed + 0x9E3779B97F4A7C15ull * (ordinal + 1));
  } else {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t local = 0;
    state = Mix(static_cast<uint64_t>(now.tv_nsec) ^ (static_cast<uint64_t>(now.tv_sec) << 30) ^
                reinterpret_cast<uintptr_t>(&local) ^ ordinal);
  }
  g_thread.sample_state = state != 0 ? state : 1;
  g_thread.sample_countdown = ExponentialGap(&g_thread.sample_state, g_sample_interval);
  g_thread.sample_started = 1;
}

}  // namespace

uint64_t g_sample_interval;
uint8_t* g_sampled_filter;

double NaturalLog(double x) {
  // x = m * 2^e with m in [1, 2); ln m = 2 atanh((m - 1) / (m + 1)).
  uint64_t bits;
  memcpy(&bits, &x, sizeof(bits));
  int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);
  double m;
  memcpy(&m, &bits, sizeof(m));
  if (m > 1.4142135623730951) {  // keep s small: m in [0.707, 1.414)
    m *= 0.5;
    ++exponent;
  }
  const double s = (m - 1) / (m + 1);
  const double s2 = s * s;
  const double series =
      s * (2 + s2 * (2.0 / 3 + s2 * (2.0 / 5 + s2 * (2.0 / 7 + s2 * (2.0 / 9 + s2 * (2.0 / 11))))));
  return exponent * 0.6931471805599453 + series;
}

int64_t ExponentialGap(uint64_t* state, uint64_t mean) {
  // xorshift64*: a uniform in (0, 1] from the top 53 bits.
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  const uint64_t r = (x * 0x2545F4914F6CDD1Dull) >> 11;
  const double uniform = (static_cast<double>(r) + 1.0) * (1.0 / 9007199254740992.0);
  const double gap = -NaturalLog(uniform) * static_cast<double>(mean);
  return gap < 1 ? 1 : static_cast<int64_t>(gap);
}

bool ConfigureSampler(uint64_t interval, uint64_t seed) {
  g_seed = seed;
  g_seed_fixed = seed != 0;
  g_sample_interval = 0;
  if (interval == 0) return true;
  if (g_sampled_filter == nullptr) g_sampled_filter = static_cast<uint8_t*>(MapPages(kFilterSize));
  if (g_sampled_filter == nullptr) return false;
  g_sample_interval = interval;
  return true;
}

bool SampleSlow(size_t size) {
  if (g_thread.sample_started == 0) {
    StartThread();
    int64_t left = g_thread.sample_countdown - static_cast<int64_t>(size);
    if (left > 0) {
      g_thread.sample_countdown = left;
      return false;
    }
  }
  // A sampling point fell inside this allocation; draw gaps from it until
  // the next point lies beyond the allocation's end.
  int64_t left = g_thread.sample_countdown - static_cast<int64_t>(size);
  while (left <= 0) left += ExponentialGap(&g_thread.sample_state, g_sample_interval);
  g_thread.sample_countdown = left;
  return true;
}

void SampledInsert(uintptr_t address) {
  uint8_t* counter = &g_sampled_filter[SampledFilterIndex(address)];
  uint8_t value = __atomic_load_n(counter, __ATOMIC_RELAXED);
  while (value != 255 &&
         !__atomic_compare_exchange_n(counter, &value, static_cast<uint8_t>(value + 1), true,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

void SampledErase(uintptr_t address) {
  uint8_t* counter = &g_sampled_filter[SampledFilterIndex(address)];
  uint8_t value = __atomic_load_n(counter, __ATOMIC_RELAXED);
  while (value != 255 && value != 0 &&
         !__atomic_compare_exchange_n(counter, &value, static_cast<uint8_t>(value - 1), true,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

}  // namespace retain::shim
