// libFuzzer target for the malloc_info parser
// (shim/src/snapshot/malloc_info_parser.h).
//
// Input: the first byte picks the page size (4 KiB << (byte % 5)); the rest
// is text, given to three parsers: A whole, B byte by byte, C in pieces whose
// sizes come from the text's own bytes. All three must report the same
// arenas with the same figures and agree on Finish(); each reports at most
// kMaxArenas, never more than it saw, and all of them when it says the text
// was whole. Seeds: real malloc_info output (tests/fuzz/malloc_info_corpus).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "snapshot/malloc_info_parser.h"

namespace {

using retain::shim::MallocArenaInfo;
using retain::shim::MallocInfoParser;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

void Collect(const MallocArenaInfo& arena, void* context) {
  static_cast<std::vector<MallocArenaInfo>*>(context)->push_back(arena);
}

struct Run {
  std::vector<MallocArenaInfo> arenas;
  bool complete = false;
  uint32_t seen = 0;
  uint32_t reported = 0;
};

template <typename Split>
Run Parse(uint64_t page, const char* text, size_t size, Split split) {
  Run run;
  MallocInfoParser parser(page, &Collect, &run.arenas);
  split(parser, text, size);
  run.complete = parser.Finish();
  run.seen = parser.seen();
  run.reported = parser.reported();
  return run;
}

bool Same(const MallocArenaInfo& a, const MallocArenaInfo& b) {
  return a.number == b.number && a.free_bytes == b.free_bytes && a.free_chunks == b.free_chunks &&
         a.fast_bytes == b.fast_bytes && a.system_bytes == b.system_bytes &&
         a.system_max_bytes == b.system_max_bytes && a.aspace_bytes == b.aspace_bytes &&
         a.aspace_mprotect_bytes == b.aspace_mprotect_bytes && a.subheaps == b.subheaps &&
         a.trimmable_bytes == b.trimmable_bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint64_t page = uint64_t{4096} << (data[0] % 5);
  const char* text = reinterpret_cast<const char*>(data + 1);
  const size_t length = size - 1;
  const Run whole =
      Parse(page, text, length, [](MallocInfoParser& p, const char* t, size_t n) { p.Feed(t, n); });
  const Run bytes = Parse(page, text, length, [](MallocInfoParser& p, const char* t, size_t n) {
    for (size_t i = 0; i < n; ++i) p.Feed(t + i, 1);
  });
  const Run pieces = Parse(page, text, length, [](MallocInfoParser& p, const char* t, size_t n) {
    for (size_t at = 0; at < n;) {
      const size_t piece = 1 + static_cast<uint8_t>(t[at]) % 97;
      const size_t take = piece < n - at ? piece : n - at;
      p.Feed(t + at, take);
      at += take;
    }
  });
  for (const Run* run : {&whole, &bytes, &pieces}) {
    Check(run->reported == run->arenas.size(), "reported counts the sink's calls");
    Check(run->reported <= MallocInfoParser::kMaxArenas, "at most kMaxArenas");
    Check(run->reported <= run->seen, "never more reported than seen");
    Check(!run->complete || run->reported == run->seen, "whole means every arena reported");
    Check(run->complete == whole.complete, "Finish() agrees however the text is split");
    Check(run->arenas.size() == whole.arenas.size(), "the same arenas however split");
    for (size_t i = 0; i < run->arenas.size(); ++i) {
      Check(Same(run->arenas[i], whole.arenas[i]), "the same figures however split");
    }
  }
  return 0;
}
