// region_groups: which group of a live table's shards an address belongs to,
// by the address's 64 MiB region.
//
// An allocator serves each thread mostly from its own region: glibc gives
// threads their own arenas, each a 64 MiB-aligned heap (the main arena is
// the brk heap), and other allocators keep per-thread caches of their own
// spans. Choosing the shard by a hash of the whole address spreads every
// thread over every shard, so nearly every insert and free takes a lock and
// touches counters whose cache line another core wrote last (measured on
// the 2-thread bench: about a quarter of the shim's time per call). Giving
// each region its own group of shards keeps a thread's records, locks and
// counters in its own core's cache; threads sharing one arena still spread
// over the group's shards.
//
// Regions get groups in the order they are first seen (round-robin over
// kGroups), so the first kGroups regions never share a group, whatever their
// addresses. The assignment is fixed for the life of the process (a record's
// shard must not change): regions are kept in a small open-addressing table
// whose words are only ever set once, and a region that finds no free word
// within its probe window (rare before hundreds of regions)
// gets a group from its hash instead, which is just as fixed.
//
// Trivially constructible: zeroed static storage is an empty table (hooks
// may run before any initialiser). Thread-safe, lock-free; async-signal-safe.
#ifndef RETAIN_SHIM_SRC_RECORD_REGION_GROUPS_H_
#define RETAIN_SHIM_SRC_RECORD_REGION_GROUPS_H_

#include <cstdint>

namespace retain::shim {

class RegionGroups {
 public:
  static constexpr int kRegionShift = 26;  // 64 MiB, glibc's per-thread heap
  static constexpr uint32_t kGroups = 16;

  // The group (0 .. kGroups - 1) of the region holding `address`.
  uint32_t GroupOf(uintptr_t address) {
    const uint64_t region = static_cast<uint64_t>(address) >> kRegionShift;
    const uint64_t mixed = region * 0x9E3779B97F4A7C15ull;
    uint32_t slot = static_cast<uint32_t>(mixed >> (64 - kSlotBits));
    for (uint32_t probe = 0; probe < kProbes; ++probe, slot = (slot + 1) & (kSlots - 1)) {
      uint64_t word = __atomic_load_n(&words_[slot], __ATOMIC_ACQUIRE);
      if (word == 0) {
        // First sight of this region here: claim the word (or learn who did).
        const uint64_t group = __atomic_fetch_add(&next_group_, 1, __ATOMIC_RELAXED) % kGroups;
        const uint64_t claim = (region << kGroupBits) | (group + 1);
        if (__atomic_compare_exchange_n(&words_[slot], &word, claim, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
          return static_cast<uint32_t>(group);
        }
        // Another thread claimed it first: `word` is now its value.
      }
      if ((word >> kGroupBits) == region) {
        return static_cast<uint32_t>((word & ((1u << kGroupBits) - 1)) - 1);
      }
    }
    return static_cast<uint32_t>(mixed >> 60) % kGroups;  // window full: fixed by the hash
  }

 private:
  static constexpr int kSlotBits = 10;
  static constexpr uint32_t kSlots = 1u << kSlotBits;
  static constexpr uint32_t kProbes = 8;
  static constexpr int kGroupBits = 8;  // a word: region << 8 | (group + 1); 0 = empty

  uint64_t words_[kSlots];
  uint64_t next_group_;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_REGION_GROUPS_H_
