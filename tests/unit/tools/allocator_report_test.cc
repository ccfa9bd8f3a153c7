// The allocator lines of retain-diff's header (tools/lib/allocator_report.h)
// on snapshots built here: each advice rule at its boundary (the figure
// that just reaches a floor gives the advice, one byte less does not), the
// resident bound, no advice without mallinfo2 or for a degraded snapshot,
// the arenas line (compact for many arenas), the trim lines and the JSON.
#include "tools/lib/allocator_report.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"

namespace retain::tool {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kSecond = 1000000000;

struct Arena {
  uint32_t number;
  uint64_t free_bytes;
  uint64_t trimmable = 0;
};

// A snapshot of pid 7 at 100 s with RssAnon `anon`, glibc's figures and
// arenas as given.
v1::Snapshot Snapshot(uint64_t anon, const std::vector<Arena>& arenas = {},
                      uint64_t top_releasable = 0, uint64_t mmapped = 0) {
  v1::Snapshot s;
  s.mutable_header()->set_pid(7);
  s.mutable_header()->set_time_unix_ns(100 * kSecond);
  v1::ProcessMemory* m = s.mutable_memory();
  m->set_rss_anon(anon);
  m->set_has_mallinfo(true);
  m->set_malloc_top_releasable(top_releasable);
  m->set_malloc_mmapped(mmapped);
  uint64_t free_held = 0;
  for (const Arena& a : arenas) {
    v1::MallocArena* arena = m->add_malloc_arenas();
    arena->set_number(a.number);
    arena->set_free_bytes(a.free_bytes);
    arena->set_trimmable_bytes(a.trimmable);
    arena->set_system_bytes(a.free_bytes + kMiB);
    free_held += a.free_bytes;
  }
  m->set_malloc_free_held(free_held);
  return s;
}

void AddHeapRows(v1::Snapshot& s, uint64_t size, int count) {
  v1::AllocationBlock* block =
      s.allocations_size() == 0 ? s.add_allocations() : s.mutable_allocations(0);
  for (int i = 0; i < count; ++i) {
    block->add_address_delta(size);
    block->add_size(size);
    block->add_kind(v1::KIND_HEAP);
    block->add_stack_id(0);
    block->add_birth_sequence(1);
    block->add_birth_time_us(1);
    block->add_thread_id(1);
  }
}

AllocatorReport Report(const v1::Snapshot& after, int64_t tracked_anon = 0,
                       const v1::Snapshot* before = nullptr, bool same_process = true) {
  AllocatorInput input;
  input.before = before;
  input.after = &after;
  input.same_process = same_process;
  input.tracked_anon = tracked_anon;
  return ReportAllocator(input);
}

std::vector<std::string> Knobs(const AllocatorReport& report) {
  std::vector<std::string> knobs;
  for (const AllocatorAdvice& advice : report.advice) knobs.push_back(advice.knob);
  return knobs;
}

// MALLOC_ARENA_MAX: 4 thread arenas holding 16 MiB each: 64 MiB, the floor;
// without the largest, 48 MiB; 32 % of RssAnon 200 MiB.
std::vector<Arena> Spread(uint64_t each, int arenas = 4) {
  std::vector<Arena> spread = {{0, kMiB}};
  for (int i = 1; i <= arenas; ++i) spread.push_back({static_cast<uint32_t>(i), each});
  return spread;
}

TEST(AllocatorAdviceTest, ArenaMaxAtItsFloorAndNotBelow) {
  const AllocatorReport report = Report(Snapshot(200 * kMiB, Spread(16 * kMiB)), 10 * kMiB);
  EXPECT_THAT(Knobs(report), ElementsAre("MALLOC_ARENA_MAX"));
  EXPECT_EQ(report.advice[0].setting, "MALLOC_ARENA_MAX=2");
  EXPECT_EQ(report.advice[0].bytes, 64 * kMiB);
  EXPECT_EQ(report.advice[0].reason,
            "4 thread arenas hold 64.0 MiB free (32% of RssAnon+VmSwap), which only their own "
            "threads can reuse; fewer arenas (glibc allows 8 per core) would share it");
  // 64 MiB - 4 bytes.
  EXPECT_THAT(Knobs(Report(Snapshot(200 * kMiB, Spread(16 * kMiB - 1)), 10 * kMiB)), IsEmpty());
}

TEST(AllocatorAdviceTest, ArenaMaxNeedsAQuarterOfTheMemory) {
  // 64 MiB is 25 % of 256 MiB, and less of 257 MiB.
  EXPECT_THAT(Knobs(Report(Snapshot(256 * kMiB, Spread(16 * kMiB)))),
              ElementsAre("MALLOC_ARENA_MAX"));
  EXPECT_THAT(Knobs(Report(Snapshot(257 * kMiB, Spread(16 * kMiB)))), IsEmpty());
}

TEST(AllocatorAdviceTest, ArenaMaxNeedsTheFreeMemorySpread) {
  // 40 + 32 MiB: without the largest, 32 MiB remain (the floor); with
  // 32 MiB - 1 they do not, though the total is above 64 MiB.
  EXPECT_THAT(Knobs(Report(Snapshot(200 * kMiB, {{0, kMiB}, {1, 40 * kMiB}, {2, 32 * kMiB}}))),
              ElementsAre("MALLOC_ARENA_MAX"));
  EXPECT_THAT(Knobs(Report(Snapshot(200 * kMiB, {{0, kMiB}, {1, 40 * kMiB}, {2, 32 * kMiB - 1}}))),
              IsEmpty());
  // One thread arena holding it all: fewer arenas would not share it.
  EXPECT_THAT(Knobs(Report(Snapshot(200 * kMiB, {{0, kMiB}, {1, 100 * kMiB}}))), IsEmpty());
  // The main arena's free memory is not the thread arenas'.
  EXPECT_THAT(Knobs(Report(Snapshot(300 * kMiB, {{0, 200 * kMiB}, {1, 8 * kMiB}, {2, 8 * kMiB}}))),
              IsEmpty());
}

TEST(AllocatorAdviceTest, FreeMemoryBeyondTheResidentBoundSupportsNothing) {
  // RssAnon 200 MiB, 137 MiB of it tracked: at most 63 MiB can be free.
  EXPECT_THAT(Knobs(Report(Snapshot(200 * kMiB, Spread(16 * kMiB)), 137 * kMiB)), IsEmpty());
  EXPECT_THAT(Knobs(Report(Snapshot(200 * kMiB, Spread(16 * kMiB)), 136 * kMiB)),
              ElementsAre("MALLOC_ARENA_MAX"));
}

TEST(AllocatorAdviceTest, TrimThresholdForTheMainHeapsTop) {
  // 32 MiB is 10 % of 320 MiB.
  const AllocatorReport report = Report(Snapshot(320 * kMiB, {{0, 40 * kMiB}}, 32 * kMiB));
  EXPECT_THAT(Knobs(report), ElementsAre("M_TRIM_THRESHOLD"));
  EXPECT_EQ(report.advice[0].setting, "MALLOC_TRIM_THRESHOLD_=4194304");
  EXPECT_THAT(report.advice[0].reason, HasSubstr("the top of the main heap holds 32.0 MiB free"));
  EXPECT_THAT(Knobs(Report(Snapshot(320 * kMiB, {{0, 40 * kMiB}}, 32 * kMiB - 1))), IsEmpty());
  EXPECT_THAT(Knobs(Report(Snapshot(321 * kMiB, {{0, 40 * kMiB}}, 32 * kMiB))), IsEmpty());
  // Needs only mallinfo2: a snapshot without arenas (an older shim) too.
  EXPECT_THAT(Knobs(Report(Snapshot(320 * kMiB, {}, 32 * kMiB))), ElementsAre("M_TRIM_THRESHOLD"));
}

TEST(AllocatorAdviceTest, MmapThresholdForLargeBlocksInsideTheHeaps) {
  // 40 MiB of 1 MiB blocks, 8 MiB of them mapped: 32 MiB inside the heaps;
  // 32 MiB free, 10 % of 320 MiB.
  auto snapshot = [](uint64_t mmapped, uint64_t free_bytes, uint64_t block) {
    v1::Snapshot s = Snapshot(320 * kMiB, {}, 0, mmapped);
    s.mutable_memory()->set_malloc_free_held(free_bytes);
    AddHeapRows(s, block, static_cast<int>(40 * kMiB / block));
    return s;
  };
  const AllocatorReport report = Report(snapshot(8 * kMiB, 32 * kMiB, kMiB));
  EXPECT_EQ(report.large_heap_bytes, 40 * kMiB);
  EXPECT_THAT(Knobs(report), ElementsAre("M_MMAP_THRESHOLD"));
  EXPECT_EQ(report.advice[0].setting, "MALLOC_MMAP_THRESHOLD_=131072");
  EXPECT_THAT(report.advice[0].reason,
              HasSubstr("32.0 MiB of live blocks of 128 KiB or more lie in malloc's heaps, "
                        "besides the 8.0 MiB in mapped chunks"));
  EXPECT_THAT(Knobs(Report(snapshot(8 * kMiB + 1, 32 * kMiB, kMiB))), IsEmpty());
  EXPECT_THAT(Knobs(Report(snapshot(8 * kMiB, 32 * kMiB - 1, kMiB))), IsEmpty());
  // Blocks of 128 KiB count; of 128 KiB - 16 bytes (glibc's threshold
  // compares chunk sizes; the rows' sizes are what was asked) not.
  EXPECT_THAT(Knobs(Report(snapshot(8 * kMiB, 32 * kMiB, 128 * 1024))),
              ElementsAre("M_MMAP_THRESHOLD"));
  const v1::Snapshot small = snapshot(0, 32 * kMiB, 128 * 1024 - 16);
  EXPECT_EQ(Report(small).large_heap_bytes, 0u);
  EXPECT_THAT(Knobs(Report(small)), IsEmpty());
}

TEST(AllocatorAdviceTest, MallocTrimForWholeFreePagesBetweenLiveBlocks) {
  const AllocatorReport report = Report(Snapshot(320 * kMiB, {{0, 40 * kMiB, 32 * kMiB}}));
  EXPECT_THAT(Knobs(report), ElementsAre("malloc_trim"));
  EXPECT_EQ(report.advice[0].setting, "malloc_trim(0)");
  EXPECT_EQ(report.advice[0].reason,
            "at least 32.0 MiB of free whole pages lie between live blocks (10% of "
            "RssAnon+VmSwap), where free() never gives memory back and no threshold would; a "
            "trim returns them (POST /trim on the control endpoint)");
  EXPECT_THAT(Knobs(Report(Snapshot(320 * kMiB, {{0, 40 * kMiB, 32 * kMiB - 1}}))), IsEmpty());
  EXPECT_THAT(Knobs(Report(Snapshot(321 * kMiB, {{0, 40 * kMiB, 32 * kMiB}}))), IsEmpty());
  // After a trim: the chunks are still free, their pages are not resident.
  v1::Snapshot trimmed = Snapshot(20 * kMiB, {{0, 40 * kMiB, 32 * kMiB}});
  trimmed.mutable_memory()->set_trims(1);
  EXPECT_THAT(Knobs(Report(trimmed, 2 * kMiB)), IsEmpty());
}

TEST(AllocatorAdviceTest, NeverWithoutMallinfoNorForADegradedSnapshot) {
  // Every rule would hold.
  v1::Snapshot all = Snapshot(400 * kMiB,
                              {{0, 100 * kMiB, 90 * kMiB},
                               {1, 40 * kMiB, 30 * kMiB},
                               {2, 40 * kMiB, 30 * kMiB},
                               {3, 40 * kMiB, 30 * kMiB}},
                              64 * kMiB, 0);
  AddHeapRows(all, kMiB, 64);
  EXPECT_THAT(Knobs(Report(all)), ElementsAre("M_MMAP_THRESHOLD", "malloc_trim", "MALLOC_ARENA_MAX",
                                              "M_TRIM_THRESHOLD"))
      << "most bytes first: 220, 180, 120, 64 MiB";
  v1::Snapshot degraded = all;
  degraded.mutable_health()->set_degraded(true);
  EXPECT_THAT(Knobs(Report(degraded)), IsEmpty());
  v1::Snapshot no_mallinfo = all;
  no_mallinfo.mutable_memory()->set_has_mallinfo(false);
  const AllocatorReport report = Report(no_mallinfo);
  EXPECT_THAT(Knobs(report), IsEmpty());
  EXPECT_EQ(AllocatorArenasText(report), "");
  EXPECT_EQ(AllocatorTrimAndAdviceText(report), "");
}

TEST(AllocatorAdviceTest, AQuietProgramGetsNone) {
  // A server at rest: 60 MiB, 3 MiB free in 3 arenas, a small top.
  const AllocatorReport report =
      Report(Snapshot(60 * kMiB, {{0, 2 * kMiB, kMiB}, {1, 512 * 1024}, {2, 512 * 1024}}, kMiB),
             40 * kMiB);
  EXPECT_THAT(Knobs(report), IsEmpty());
  EXPECT_THAT(AllocatorTrimAndAdviceText(report), Not(HasSubstr("advice")));
}

TEST(AllocatorTextTest, ArenasLineNamesTheMainArenaAndTheLargestFew) {
  std::vector<Arena> arenas = {{0, 2 * kMiB}};
  for (uint32_t i = 1; i <= 9; ++i) arenas.push_back({i, i * kMiB, kMiB / 2});
  const AllocatorReport report = Report(Snapshot(500 * kMiB, arenas));
  EXPECT_EQ(AllocatorArenasText(report),
            "  arenas      47.0 MiB free held by malloc in 10 arenas (main 2.0 MiB, #9 9.0 MiB, "
            "#8 8.0 MiB, #7 7.0 MiB, 6 more 21.0 MiB); at least 4.5 MiB of it whole pages "
            "between live blocks\n");
  EXPECT_EQ(AllocatorArenasText(Report(Snapshot(50 * kMiB, {{0, 3 * kMiB}}))),
            "  arenas      3.0 MiB free held by malloc in 1 arena (main 3.0 MiB)\n");
  v1::Snapshot cut = Snapshot(50 * kMiB, {{0, 3 * kMiB}});
  cut.mutable_memory()->set_malloc_arenas_truncated(true);
  EXPECT_THAT(AllocatorArenasText(Report(cut)),
              HasSubstr("; the shim's list is incomplete (sums are low)\n"));
  // No arenas (an older shim): no line; the allocator line has mallinfo2.
  EXPECT_EQ(AllocatorArenasText(Report(Snapshot(50 * kMiB))), "");
}

TEST(AllocatorTextTest, TrimLines) {
  v1::Snapshot before = Snapshot(130 * kMiB, {{0, 115 * kMiB, 113 * kMiB}});
  v1::Snapshot after = Snapshot(7 * kMiB, {{0, 115 * kMiB, 113 * kMiB}});
  after.mutable_memory()->set_trims(1);
  after.mutable_memory()->set_trim_returned_bytes(114 * kMiB);
  after.mutable_memory()->set_last_trim_unix_ns(97 * kSecond);
  // One snapshot.
  AllocatorReport live = Report(after, kMiB);
  EXPECT_EQ(AllocatorTrimAndAdviceText(live),
            "  trim        1 trim returned 114.0 MiB (3.0 s before this snapshot)\n");
  EXPECT_EQ(AllocatorArenasText(live),
            "  arenas      115.0 MiB free held by malloc in 1 arena (main 115.0 MiB); at most "
            "6.0 MiB of it resident (trims gave the rest's pages back)\n");
  // A trim between two snapshots of the process.
  const AllocatorReport between = Report(after, kMiB, &before);
  EXPECT_EQ(between.trims_between, 1u);
  EXPECT_EQ(between.trim_returned_between, 114 * kMiB);
  EXPECT_EQ(AllocatorTrimAndAdviceText(between),
            "  trim        a trim ran between the two snapshots and returned 114.0 MiB: part of "
            "the drop is malloc returning free memory, not frees\n");
  // Before both.
  before.mutable_memory()->set_trims(2);
  before.mutable_memory()->set_trim_returned_bytes(114 * kMiB);
  after.mutable_memory()->set_trims(2);
  EXPECT_EQ(AllocatorTrimAndAdviceText(Report(after, kMiB, &before)),
            "  trim        2 trims returned 114.0 MiB before both snapshots (the last 3.0 s "
            "before the after snapshot)\n");
  // One that returned nothing; and two processes, where "between" means
  // nothing.
  before.mutable_memory()->set_trims(1);
  EXPECT_THAT(AllocatorTrimAndAdviceText(Report(after, kMiB, &before)),
              HasSubstr("a trim ran between the two snapshots and returned 0 B (malloc held no "
                        "free whole pages, or reused them)"));
  const AllocatorReport others = Report(after, kMiB, &before, false);
  EXPECT_FALSE(others.has_between);
  EXPECT_THAT(AllocatorTrimAndAdviceText(others), HasSubstr("  trim        2 trims returned"));
  // No trim: no line.
  EXPECT_EQ(AllocatorTrimAndAdviceText(Report(Snapshot(7 * kMiB))), "");
}

TEST(AllocatorTextTest, Json) {
  v1::Snapshot after = Snapshot(320 * kMiB, {{0, 40 * kMiB, 32 * kMiB}, {1, kMiB}}, 4096);
  after.mutable_memory()->set_trims(1);
  after.mutable_memory()->set_trim_returned_bytes(5);
  after.mutable_memory()->set_last_trim_unix_ns(99 * kSecond);
  const std::string json = AllocatorReportJson(Report(after));
  EXPECT_THAT(json, HasSubstr(absl::StrCat("{\"has_mallinfo\":true,\"free_held\":", 41 * kMiB,
                                           ",\"top_releasable\":4096,\"mmapped\":0,"
                                           "\"arena_count\":2,\"arenas_truncated\":false,"
                                           "\"arenas\":[{\"number\":0,\"free_bytes\":",
                                           40 * kMiB, ",\"free_chunks\":0,\"fast_bytes\":0,")));
  EXPECT_THAT(json, HasSubstr(",\"subheaps\":0,\"trimmable_bytes\":33554432},{\"number\":1,"));
  EXPECT_THAT(json,
              HasSubstr(absl::StrCat(",\"arena_free\":", 41 * kMiB, ",\"thread_arena_free\":", kMiB,
                                     ",\"trimmable_bytes\":", 32 * kMiB,
                                     ",\"large_heap_bytes\":0,\"resident_bound\":", 320 * kMiB)));
  EXPECT_THAT(json, HasSubstr(",\"trims\":1,\"trim_returned_bytes\":5,\"last_trim_unix_ns\":"
                              "99000000000,\"trims_between\":null,\"trim_returned_between\":null,"
                              "\"advice\":[{\"knob\":\"malloc_trim\",\"setting\":"
                              "\"malloc_trim(0)\",\"reason\":\"at least 32.0 MiB"));
  EXPECT_THAT(json, HasSubstr(absl::StrCat("\",\"bytes\":", 32 * kMiB, "}]}")));
  const std::string none = AllocatorReportJson(Report(Snapshot(10 * kMiB)));
  EXPECT_THAT(none, HasSubstr("\"arenas\":[],"));
  EXPECT_THAT(none, HasSubstr("\"last_trim_unix_ns\":null,"));
  EXPECT_THAT(none, HasSubstr("\"advice\":[]}"));
}

TEST(SeriesTrimsTest, SaysWhereTheTrimsRan) {
  std::vector<v1::Snapshot> series(5, Snapshot(100 * kMiB));
  for (size_t i = 2; i < series.size(); ++i) {
    series[i].mutable_memory()->set_trims(1);
    series[i].mutable_memory()->set_trim_returned_bytes(60 * kMiB);
  }
  series[4].mutable_memory()->set_trims(3);
  series[4].mutable_memory()->set_trim_returned_bytes(70 * kMiB);
  std::vector<const v1::Snapshot*> pointers;
  for (const v1::Snapshot& s : series) pointers.push_back(&s);
  const SeriesTrims trims = TrimsDuring(pointers);
  EXPECT_EQ(trims.trims, 3u);
  EXPECT_EQ(trims.returned_bytes, 70 * kMiB);
  EXPECT_THAT(trims.after_trim, ElementsAre(2, 4));
  EXPECT_EQ(SeriesTrimsText(trims),
            "  trim        3 trims during the series returned 70.0 MiB (between snapshots 2 and 3, "
            "4 and 5): a fall in RSS there is malloc returning free memory, not frees\n");
  EXPECT_EQ(SeriesTrimsJson(trims),
            absl::StrCat("{\"count\":3,\"returned_bytes\":", 70 * kMiB, ",\"after_trim\":[2,4]}"));
  // Trims before the series began are not during it.
  pointers.erase(pointers.begin(), pointers.begin() + 2);
  pointers.pop_back();
  EXPECT_EQ(SeriesTrimsText(TrimsDuring(pointers)), "");
}

}  // namespace
}  // namespace retain::tool
