// sampler: RETAIN_SAMPLE=BYTES, Poisson sampling by bytes (as tcmalloc and
// heapprofd do) for a shim cheap enough to leave on.
//
// Sampling points fall on the stream of allocated bytes with exponentially
// distributed gaps of mean BYTES; an allocation is recorded when at least one
// point falls inside it, so an allocation of s bytes is recorded with
// probability 1 - exp(-s / BYTES), and retain-diff scales each record by the
// inverse. Allocations of at least BYTES are always recorded (a 126 MiB
// cache entry is never missed), and so are mappings and GPU allocations
// (sampling applies to the malloc family only).
//
// The unsampled path costs a thread-local subtraction on allocation and, on
// free, one load from a small counting filter of the addresses recorded
// (SampledMayContain): frees of blocks the shim never recorded take no lock.
#ifndef RETAIN_SHIM_SRC_RECORD_SAMPLER_H_
#define RETAIN_SHIM_SRC_RECORD_SAMPLER_H_

#include <cstddef>
#include <cstdint>

#include "base/thread_state.h"

namespace retain::shim {

// The mean sampling interval in bytes; 0 when every allocation is recorded.
// Set once by ConfigureSampler before any hook records.
extern uint64_t g_sample_interval;

// Reads the interval and seed (RETAIN_SAMPLE, RETAIN_SAMPLE_SEED) from the
// configuration and sets up the filter. Returns false (sampling off, with a
// warning) when the filter's memory cannot be had.
bool ConfigureSampler(uint64_t interval, uint64_t seed);

// The slow path of ShouldRecordHeap: this thread's countdown ran out (or was
// never started).
bool SampleSlow(size_t size);

// Whether an allocation of `size` bytes made now on this thread is recorded.
// Inside a GPU call it always is: the runtime's host memory is
// gpu-driver-host, a kind that is never sampled.
inline bool ShouldRecordHeap(size_t size) {
  const uint64_t interval = g_sample_interval;
  if (__builtin_expect(interval == 0 || size >= interval || g_thread.gpu_depth != 0, 0)) {
    return true;
  }
  const int64_t left = g_thread.sample_countdown - static_cast<int64_t>(size);
  if (__builtin_expect(left > 0, 1)) {
    g_thread.sample_countdown = left;
    return false;
  }
  return SampleSlow(size);
}

// The counting filter of recorded heap addresses (sampling mode only):
// 2^16 one-byte counters (64 KiB, small enough to stay in cache; with a few
// thousand sampled blocks live, under 5% of frees of unsampled blocks look
// further). A counter saturates at 255 and then stays: a false "may
// contain" costs a table lookup, never a wrong answer. Insert before the
// record goes into the table; Erase after it left it. MayContain is false
// only for addresses with no record.
inline constexpr int kSampledFilterBits = 16;
extern uint8_t* g_sampled_filter;
inline size_t SampledFilterIndex(uintptr_t address) {
  return static_cast<size_t>(((address >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - kSampledFilterBits));
}
void SampledInsert(uintptr_t address);
void SampledErase(uintptr_t address);
inline bool SampledMayContain(uintptr_t address) {
  return __atomic_load_n(&g_sampled_filter[SampledFilterIndex(address)], __ATOMIC_RELAXED) != 0;
}

// Draws an exponential gap of mean `mean` from `*state` (xorshift64*).
// Exposed for tests.
int64_t ExponentialGap(uint64_t* state, uint64_t mean);

// ln(x) for 0 < x <= 1 without libm (the shim links libc only); absolute
// error below 1e-6. Exposed for tests.
double NaturalLog(double x);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_SAMPLER_H_
