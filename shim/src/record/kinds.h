// kinds: the memory kinds the shim records, with the values proto/retain.proto
// gives them on disk (a unit test checks they agree), and the per-kind
// counters every table keeps.
#ifndef RETAIN_SHIM_SRC_RECORD_KINDS_H_
#define RETAIN_SHIM_SRC_RECORD_KINDS_H_

#include <cstdint>

namespace retain::shim {

enum class Kind : uint8_t {
  kUnspecified = 0,
  kHeap = 1,
  kMmapAnon = 2,
  kMmapFile = 3,
  kGpuDriverHost = 4,
  kHipDevice = 10,
  kHipHost = 11,
  kHipManaged = 12,
  kVulkanDevice = 20,
  kCudaDevice = 30,
  kCudaHost = 31,
  kCudaManaged = 32,
  kMetal = 40,
};

// Dense index of each kind, for counter arrays.
inline constexpr Kind kAllKinds[] = {
    Kind::kHeap,       Kind::kMmapAnon, Kind::kMmapFile,    Kind::kGpuDriverHost,
    Kind::kHipDevice,  Kind::kHipHost,  Kind::kHipManaged,  Kind::kVulkanDevice,
    Kind::kCudaDevice, Kind::kCudaHost, Kind::kCudaManaged, Kind::kMetal,
};
inline constexpr int kKindCount = sizeof(kAllKinds) / sizeof(kAllKinds[0]);

constexpr int KindIndex(Kind kind) {
  for (int i = 0; i < kKindCount; ++i) {
    if (kAllKinds[i] == kind) return i;
  }
  return 0;
}

// Counters for one kind. Who updates them holds the lock of the table they
// belong to; readers sum them over tables. Trivial, like the tables holding
// them (see LiveTable); zero them with `= {}`.
struct KindCounters {
  uint64_t live_bytes;
  uint64_t live_count;
  uint64_t allocated_bytes;
  uint64_t allocated_count;
  uint64_t freed_bytes;
  uint64_t freed_count;

  void Add(const KindCounters& other) {
    live_bytes += other.live_bytes;
    live_count += other.live_count;
    allocated_bytes += other.allocated_bytes;
    allocated_count += other.allocated_count;
    freed_bytes += other.freed_bytes;
    freed_count += other.freed_count;
  }
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_KINDS_H_
