// malloc_info_parser: reads the XML glibc's malloc_info(3) prints, one
// arena (<heap nr="N"> ... </heap>) at a time, as it arrives; the format and
// the figures are described in snapshot/malloc_arenas.h, which runs it.
//
// Plain code over fixed-size members: thread-compatible (one parser per
// caller), no allocation, no system call, nothing but the caller's sink
// called. Fuzzed (tests/fuzz/malloc_info_fuzz.cc).
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_MALLOC_INFO_PARSER_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_MALLOC_INFO_PARSER_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// One arena, named as proto/retain.proto's MallocArena (which says what
// glibc calls each figure).
struct MallocArenaInfo {
  uint32_t number;
  uint64_t free_bytes;  // fast + rest
  uint64_t free_chunks;
  uint64_t fast_bytes;
  uint64_t system_bytes;
  uint64_t system_max_bytes;
  uint64_t aspace_bytes;
  uint64_t aspace_mprotect_bytes;
  uint32_t subheaps;
  uint64_t trimmable_bytes;  // lower bound, see MallocArena.trimmable_bytes
};

// Called once per complete arena, in the order glibc prints them.
using MallocArenaSink = void (*)(const MallocArenaInfo& arena, void* context);

// Reads malloc_info's XML as it arrives, in pieces of any size (a line may
// be split between two Feed calls). An arena is reported when its </heap>
// line arrives and it had its totals; one that is cut off, malformed or past
// kMaxArenas is not, and makes Finish() false.
class MallocInfoParser {
 public:
  static constexpr uint32_t kMaxArenas = 4096;
  // glibc's lines are under 100 bytes; a longer one is not malloc_info's.
  static constexpr size_t kMaxLine = 256;

  // `page_size`: for trimmable_bytes (two pages per free chunk are not).
  MallocInfoParser(uint64_t page_size, MallocArenaSink sink, void* context);

  void Feed(const char* data, size_t size);
  // The text ended. True when it was whole: </malloc> seen, every arena
  // closed and reported, no line malformed or overlong, none left out.
  bool Finish();

  uint32_t reported() const { return reported_; }
  // Arenas seen (<heap> lines), reported or not.
  uint32_t seen() const { return seen_; }

 private:
  void Line(const char* line, size_t size);

  uint64_t page_size_;
  MallocArenaSink sink_;
  void* context_;
  char line_[kMaxLine];
  size_t line_size_ = 0;
  bool overlong_ = false;
  bool in_heap_ = false;
  bool has_rest_ = false;
  bool ended_ = false;  // </malloc>
  bool damaged_ = false;
  uint32_t seen_ = 0;
  uint32_t reported_ = 0;
  uint64_t fast_chunks_ = 0;
  uint64_t rest_bytes_ = 0;
  uint64_t rest_chunks_ = 0;
  MallocArenaInfo arena_ = {};
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_MALLOC_INFO_PARSER_H_
