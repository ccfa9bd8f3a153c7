// kinds: the memory kinds the shim records, generated from the table in
// proto/kinds.h (values as proto/retain.proto gives them on disk, names as
// the tools print them; a unit test checks they agree), and the per-kind
// counters every table keeps.
//
// Header only; constants and trivial counters: safe anywhere.
#ifndef RETAIN_SHIM_SRC_RECORD_KINDS_H_
#define RETAIN_SHIM_SRC_RECORD_KINDS_H_

#include <cstdint>

#include "proto/kinds.h"

namespace retain::shim {

// The kinds, numbered as on disk: one per row of proto/kinds.h.
enum class Kind : uint8_t {
#define RETAIN_KIND_ENUMERATOR(shim, proto, value, name) shim = value,
  RETAIN_FOR_EACH_KIND(RETAIN_KIND_ENUMERATOR)
#undef RETAIN_KIND_ENUMERATOR
};

// Every kind but kUnspecified, in the table's order: the dense index of each
// kind, for counter arrays.
#define RETAIN_KIND_PLUS_ONE(shim, proto, value, name) +1
inline constexpr int kKindCount = (0 RETAIN_FOR_EACH_KIND(RETAIN_KIND_PLUS_ONE)) - 1;
#undef RETAIN_KIND_PLUS_ONE

struct KindArray {
  Kind kinds[kKindCount];
  constexpr Kind operator[](int i) const { return kinds[i]; }
  constexpr const Kind* begin() const { return kinds; }
  constexpr const Kind* end() const { return kinds + kKindCount; }
};

constexpr KindArray MakeAllKinds() {
  constexpr Kind kEvery[] = {
#define RETAIN_KIND_VALUE(shim, proto, value, name) Kind::shim,
      RETAIN_FOR_EACH_KIND(RETAIN_KIND_VALUE)
#undef RETAIN_KIND_VALUE
  };
  KindArray all{};
  int n = 0;
  for (Kind kind : kEvery) {
    if (kind != Kind::kUnspecified) all.kinds[n++] = kind;
  }
  return all;
}
inline constexpr KindArray kAllKinds = MakeAllKinds();

constexpr int KindIndex(Kind kind) {
  for (int i = 0; i < kKindCount; ++i) {
    if (kAllKinds[i] == kind) return i;
  }
  return 0;
}

// The kind's name in proto/kinds.h ("heap", "mmap-anon", ...); "unspecified"
// for a value the table does not hold.
constexpr const char* KindName(Kind kind) {
  const char* name = kinds::NameOf(static_cast<int>(kind));
  return name != nullptr ? name : "unspecified";
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
