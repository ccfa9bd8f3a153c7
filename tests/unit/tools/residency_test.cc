// retain-diff's measure (tools/lib/measure.h): resident (+ swapped) bytes by
// default, allocated on request or for snapshots without residency, on
// snapshots built here. The case of issue 14: a 400 MiB buffer of which
// 40 MiB was touched beside a 50 MiB cache that is all resident. By resident
// bytes the cache comes first and shares are computed on resident bytes; by
// allocated bytes the old order returns; the RSS explanation adds up exactly
// (tracked resident + allocator-held free + untracked = RssAnon+VmSwap, no
// negative term); a snapshot of an older shim falls back with one warning
// line and the old numbers; JSON, folded and pprof carry the measure.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profile.pb.h"
#include "retain.pb.h"
#include "tests/support/test_support.h"
#include "tools/lib/diff.h"
#include "tools/lib/diff_command.h"
#include "tools/lib/diff_format.h"
#include "tools/lib/measure.h"
#include "tools/lib/owner.h"
#include "tools/lib/pprof_writer.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kMiB = int64_t{1} << 20;

// One live allocation: its tag names its owner (--by tag).
struct Made {
  uint64_t address;
  int64_t size;
  int64_t resident;
  int64_t swapped;
  uint64_t birth;
  uint32_t tag;
};

struct Memory {
  int64_t rss_anon = 0;
  int64_t vm_swap = 0;
  int64_t free_held = 0;
};

// A snapshot of pid 7 holding `made` (heap), with its per-kind totals summed
// from the rows, as the shim writes them. `residency`: the shim measured
// resident and swapped bytes (else the columns stay empty, as older shims).
v1::Snapshot SnapshotOf(const std::vector<Made>& made, const Memory& memory, bool residency,
                        uint64_t sequence = 1, uint64_t next_birth = 100) {
  v1::Snapshot snapshot;
  v1::Header* header = snapshot.mutable_header();
  header->set_format_version(1);
  header->set_exe_path("/srv/server");
  header->set_pid(7);
  header->set_sequence(sequence);
  header->set_next_birth_sequence(next_birth);
  header->set_time_unix_ns(sequence * 1000000000);
  header->set_residency_measured(residency);
  snapshot.mutable_memory()->set_rss_anon(memory.rss_anon);
  snapshot.mutable_memory()->set_vm_rss(memory.rss_anon);
  snapshot.mutable_memory()->set_vm_swap(memory.vm_swap);
  snapshot.mutable_memory()->set_malloc_free_held(memory.free_held);
  snapshot.mutable_memory()->set_has_mallinfo(true);
  snapshot.mutable_health()->set_arena_bytes(4096);
  v1::AllocationBlock* block = snapshot.add_allocations();
  v1::KindTotals* totals = snapshot.add_totals();
  totals->set_kind(v1::KIND_HEAP);
  uint64_t previous = 0;
  for (const Made& m : made) {
    block->add_address_delta(block->address_delta_size() == 0 ? m.address : m.address - previous);
    previous = m.address;
    block->add_size(m.size);
    block->add_kind(v1::KIND_HEAP);
    block->add_stack_id(m.tag);  // one stack per owner
    block->add_birth_sequence(m.birth);
    block->add_birth_time_us(m.birth);
    block->add_thread_id(1);
    block->add_tag_id(m.tag);
    if (residency) {
      block->add_resident_bytes(m.resident);
      block->add_swapped_bytes(m.swapped);
    }
    totals->set_live_bytes(totals->live_bytes() + m.size);
    totals->set_live_count(totals->live_count() + 1);
    totals->set_allocated_bytes(totals->live_bytes());
    totals->set_allocated_count(totals->live_count());
    if (residency) {
      totals->set_resident_bytes(totals->resident_bytes() + m.resident);
      totals->set_swapped_bytes(totals->swapped_bytes() + m.swapped);
    }
  }
  for (uint32_t id : {1u, 2u}) {
    v1::Stack* stack = snapshot.add_stacks();
    stack->set_id(id);
    stack->add_frames(0x401000 + 0x100 * id);
    v1::Tag* tag = snapshot.add_tags();
    tag->set_id(id);
    tag->set_request_id(id == 1 ? "compute-buffer" : "prompt-cache");
  }
  return snapshot;
}

// The case: 400 MiB allocated, 40 MiB touched; a 50 MiB cache, 2 MiB
// of it swapped out. RssAnon 150 MiB + VmSwap 2 MiB; glibc holds 7 MiB free.
const std::vector<Made> kBuffers = {
    {0x10000000, 400 * kMiB, 40 * kMiB, 0, 10, 1},
    {0x40000000, 50 * kMiB, 48 * kMiB, 2 * kMiB, 20, 2},
};
const Memory kMemory = {150 * kMiB, 2 * kMiB, 7 * kMiB};

class Residency : public ::testing::Test {
 protected:
  void SetUp() override {
    OwnerOptions options;
    options.by = GroupBy::kTag;
    absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
        OwnerResolver::Create(symbolizer_, std::move(options));
    ASSERT_TRUE(owners.ok()) << owners.status();
    owners_ = *std::move(owners);
  }

  DiffResult Diff(const v1::Snapshot* before, const v1::Snapshot& after,
                  Measure measure = Measure::kResident) {
    DiffOptions options;
    options.measure = measure;
    options.before_name = "before.pb";
    options.after_name = "after.pb";
    absl::StatusOr<DiffResult> diff = ComputeDiff(before, after, *owners_, options);
    EXPECT_TRUE(diff.ok()) << diff.status();
    return diff.ok() ? *std::move(diff) : DiffResult();
  }

  std::string Text(const DiffResult& diff) {
    FormatOptions options;
    options.by = GroupBy::kTag;
    return FormatDiffText(diff, options);
  }
  std::string Json(const DiffResult& diff) {
    FormatOptions options;
    options.by = GroupBy::kTag;
    return FormatDiffJson(diff, options);
  }
  // The byte counts of the folded lines, summed.
  int64_t FoldedSum(const DiffResult& diff) {
    int64_t sum = 0;
    for (absl::string_view line :
         absl::StrSplit(FormatDiffFolded(diff, *owners_), '\n', absl::SkipEmpty())) {
      sum += std::strtoll(std::string(line.substr(line.rfind(' ') + 1)).c_str(), nullptr, 10);
    }
    return sum;
  }

  Symbolizer symbolizer_;
  std::unique_ptr<OwnerResolver> owners_;
};

// The RSS explanation's level: every term is memory, none negative, and the
// terms sum to RssAnon+VmSwap exactly. On consistent data a negative rest
// is a bug: this fails then.
void ExpectAddsUp(const RssLevel& level, const v1::Snapshot& snapshot) {
  EXPECT_EQ(level.anon_swap,
            static_cast<int64_t>(snapshot.memory().rss_anon() + snapshot.memory().vm_swap()));
  EXPECT_EQ(level.tracked_anon + level.allocator_free_held + level.untracked, level.anon_swap);
  EXPECT_GE(level.tracked_anon, 0);
  EXPECT_GE(level.allocator_free_held, 0);
  EXPECT_GE(level.untracked, 0) << "a negative untracked rest on consistent data";
}

TEST_F(Residency, ByResidentTheTouchedCacheComesFirstAndSharesAreOfResidentBytes) {
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, true);
  const DiffResult diff = Diff(nullptr, after);
  EXPECT_EQ(diff.measure.used, Measure::kResident);
  EXPECT_TRUE(diff.measure.residency);
  EXPECT_EQ(diff.measure.fallback_warning, "");
  ASSERT_EQ(diff.rows.size(), 2u);
  EXPECT_EQ(diff.rows[0].owner.display, "prompt-cache");
  EXPECT_EQ(diff.rows[0].retained_bytes, 50 * kMiB);  // resident + swapped
  EXPECT_EQ(diff.rows[0].retained.resident, 48 * kMiB);
  EXPECT_EQ(diff.rows[0].retained.swapped, 2 * kMiB);
  EXPECT_EQ(diff.rows[0].retained.allocated, 50 * kMiB);
  EXPECT_EQ(diff.rows[1].owner.display, "compute-buffer");
  EXPECT_EQ(diff.rows[1].retained_bytes, 40 * kMiB);
  EXPECT_EQ(diff.rows[1].retained.allocated, 400 * kMiB);
  EXPECT_EQ(diff.total_retained_bytes, 90 * kMiB);
  EXPECT_EQ(diff.total_retained.allocated, 450 * kMiB);

  // Both columns, the measure's first, swapped beside them (some is); the
  // shares are of 90 MiB: 50/90 and 40/90.
  const std::string text = Text(diff);
  EXPECT_THAT(text, HasSubstr("\n  measure     resident bytes (in RAM + swapped, as RssAnon+VmSwap "
                              "counts); allocated beside\n"));
  EXPECT_THAT(text, HasSubstr("\n   resident  allocated    swapped    count   share  owner (tag)\n"
                              "   50.0 MiB   50.0 MiB    2.0 MiB        1   55.6%  prompt-cache\n"
                              "   40.0 MiB  400.0 MiB        0 B        1   44.4%  compute-buffer\n"
                              "   90.0 MiB  450.0 MiB    2.0 MiB        2          total\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("\n  tracked     heap +90.0 MiB (allocated +450.0 MiB, swapped "
                              "+2.0 MiB)\n"))
      << text;
  EXPECT_THAT(text, Not(HasSubstr("WARNING")));
  EXPECT_THAT(text, Not(HasSubstr("warning")));
}

TEST_F(Residency, ByAllocatedTheOldOrderReturns) {
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, true);
  const DiffResult diff = Diff(nullptr, after, Measure::kAllocated);
  EXPECT_EQ(diff.measure.used, Measure::kAllocated);
  ASSERT_EQ(diff.rows.size(), 2u);
  EXPECT_EQ(diff.rows[0].owner.display, "compute-buffer");
  EXPECT_EQ(diff.rows[0].retained_bytes, 400 * kMiB);
  EXPECT_EQ(diff.rows[1].retained_bytes, 50 * kMiB);
  EXPECT_EQ(diff.total_retained_bytes, 450 * kMiB);
  const std::string text = Text(diff);
  EXPECT_THAT(text, HasSubstr("\n  measure     allocated bytes (asked for, pages never touched "
                              "included); resident beside\n"));
  EXPECT_THAT(text, HasSubstr("\n  allocated   resident    swapped    count   share  owner (tag)\n"
                              "  400.0 MiB   40.0 MiB        0 B        1   88.9%  compute-buffer\n"
                              "   50.0 MiB   50.0 MiB    2.0 MiB        1   11.1%  prompt-cache\n"))
      << text;
}

TEST_F(Residency, TheRssExplanationAddsUpExactly) {
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, true);
  const DiffResult diff = Diff(nullptr, after);
  const RssExplanation& rss = diff.rss;
  ExpectAddsUp(rss.after_level, after);
  EXPECT_EQ(rss.after_level.tracked_anon, 90 * kMiB);
  EXPECT_EQ(rss.after_level.allocator_free_held, 7 * kMiB);
  EXPECT_EQ(rss.after_level.untracked, 55 * kMiB);
  EXPECT_EQ(rss.tracked_anon_growth + rss.allocator_retained_growth + rss.untracked_growth,
            rss.anon_swap_growth);
  EXPECT_EQ(rss.adds_up_warning, "");
  const std::string text = Text(diff);
  EXPECT_THAT(text, HasSubstr("\n  adds up     tracked resident 90.0 MiB + allocator-held free "
                              "7.0 MiB + untracked 55.0 MiB = RssAnon+VmSwap 152.0 MiB\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("\n  untracked   +55.0 MiB of anonymous memory"));
  const std::string json = Json(diff);
  // shim_own: the snapshot's arena_bytes, a bound within untracked.
  EXPECT_THAT(json,
              HasSubstr(absl::StrCat(
                  "\"after_level\":{\"anon_swap\":", 152 * kMiB, ",\"tracked_anon\":", 90 * kMiB,
                  ",\"allocator_free_held\":", 7 * kMiB, ",\"untracked\":", 55 * kMiB,
                  ",\"shim_own\":4096,\"allocator_free_trimmed\":0}")));
  EXPECT_THAT(json, HasSubstr(",\"adds_up\":true}"));
}

// malloc_trim gives back the pages of free chunks but keeps the chunks:
// fordblks still counts them. After a trim (ProcessMemory.trims) the free
// bytes the rest of RssAnon+VmSwap cannot hold, up to what the trims
// returned, are not resident: the level adds up. Past what they returned it
// still does not, and the warning stays.
TEST_F(Residency, FreeChunksATrimEmptiedAreNotCountedResident) {
  v1::Snapshot after = SnapshotOf(kBuffers, {100 * kMiB, 0, 40 * kMiB}, true);
  EXPECT_NE(Diff(nullptr, after).rss.adds_up_warning, "") << "90 + 40 > 100 without a trim";
  after.mutable_memory()->set_trims(1);
  after.mutable_memory()->set_trim_returned_bytes(35 * kMiB);
  DiffResult diff = Diff(nullptr, after);
  EXPECT_EQ(diff.rss.adds_up_warning, "");
  EXPECT_EQ(diff.rss.after_level.allocator_free_trimmed, 30 * kMiB);
  EXPECT_EQ(diff.rss.after_level.allocator_free_held, 10 * kMiB);
  EXPECT_EQ(diff.rss.after_level.untracked, 0);
  EXPECT_THAT(Text(diff), HasSubstr(" + allocator-held free 10.0 MiB + untracked 0 B = "
                                    "RssAnon+VmSwap 100.0 MiB (malloc counts 30.0 MiB more free "
                                    "whose pages trims gave back)\n"));
  EXPECT_THAT(Json(diff), HasSubstr(",\"allocator_free_trimmed\":31457280}"));

  after.mutable_memory()->set_trim_returned_bytes(20 * kMiB);
  diff = Diff(nullptr, after);
  EXPECT_EQ(diff.rss.after_level.allocator_free_trimmed, 20 * kMiB);
  EXPECT_EQ(diff.rss.after_level.untracked, -10 * kMiB);
  EXPECT_NE(diff.rss.adds_up_warning, "");
  // A level that adds up without it keeps every free byte.
  after.mutable_memory()->set_rss_anon(200 * kMiB);
  diff = Diff(nullptr, after);
  EXPECT_EQ(diff.rss.after_level.allocator_free_trimmed, 0);
  EXPECT_EQ(diff.rss.after_level.allocator_free_held, 40 * kMiB);
  // The allocated measure has room for reserved bytes: nothing is taken.
  after.mutable_memory()->set_rss_anon(100 * kMiB);
  EXPECT_EQ(Diff(nullptr, after, Measure::kAllocated).rss.after_level.allocator_free_trimmed, 0);
}

// Two snapshots of one process: the cache is born in between, the buffer's
// touched part grows from 10 to 40 MiB. By resident bytes both are retained
// (the buffer's growth with no count: it is not a new allocation); by
// allocated bytes only the cache is, as before. Both levels add up, and so
// does the growth.
TEST_F(Residency, ExactDiffCountsPagesTouchedInBetween) {
  const v1::Snapshot before = SnapshotOf({{0x10000000, 400 * kMiB, 10 * kMiB, 0, 10, 1}},
                                         {40 * kMiB, 0, 3 * kMiB}, true, 1, 15);
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, true, 2, 100);
  const DiffResult diff = Diff(&before, after);
  EXPECT_EQ(diff.mode, DiffMode::kExact);
  ASSERT_EQ(diff.rows.size(), 2u);
  EXPECT_EQ(diff.rows[0].owner.display, "prompt-cache");
  EXPECT_EQ(diff.rows[0].retained_bytes, 50 * kMiB);
  EXPECT_EQ(diff.rows[0].retained_count, 1);
  EXPECT_EQ(diff.rows[1].owner.display, "compute-buffer");
  EXPECT_EQ(diff.rows[1].retained_bytes, 30 * kMiB);
  EXPECT_EQ(diff.rows[1].retained_count, 0);
  EXPECT_EQ(diff.rows[1].retained.allocated, 0);
  EXPECT_EQ(diff.total_retained_bytes, 80 * kMiB);
  EXPECT_EQ(FoldedSum(diff), diff.total_retained_bytes);
  ExpectAddsUp(diff.rss.before_level, before);
  ExpectAddsUp(diff.rss.after_level, after);
  EXPECT_EQ(diff.rss.tracked_anon_growth, 80 * kMiB);
  EXPECT_EQ(
      diff.rss.tracked_anon_growth + diff.rss.allocator_retained_growth + diff.rss.untracked_growth,
      diff.rss.anon_swap_growth);
  EXPECT_EQ(diff.rss.adds_up_warning, "");
  EXPECT_THAT(Text(diff), HasSubstr("\n  adds up     at after: tracked resident 90.0 MiB"));

  const DiffResult allocated = Diff(&before, after, Measure::kAllocated);
  ASSERT_EQ(allocated.rows.size(), 1u);  // the buffer was live before: no row
  EXPECT_EQ(allocated.rows[0].owner.display, "prompt-cache");
  EXPECT_EQ(allocated.rows[0].retained_bytes, 50 * kMiB);
  EXPECT_EQ(allocated.total_retained_bytes, 50 * kMiB);

  // Pages dropped in between (madvise, trim) are released, not counted twice.
  const DiffResult back =
      Diff(&after, SnapshotOf({{0x10000000, 400 * kMiB, 5 * kMiB, 0, 10, 1},
                               {0x40000000, 50 * kMiB, 48 * kMiB, 2 * kMiB, 20, 2}},
                              {120 * kMiB, 2 * kMiB, 7 * kMiB}, true, 3, 120));
  ASSERT_FALSE(back.rows.empty());
  EXPECT_EQ(back.total_retained_bytes, 0);
  EXPECT_EQ(back.total_released_bytes, 35 * kMiB);
}

// Resident bytes that exceed the process's anonymous memory cannot be: the
// rest is reported negative, in a warning, never clamped to 0.
TEST_F(Residency, ARestBelowZeroIsAWarningNotAClamp) {
  const v1::Snapshot after = SnapshotOf(kBuffers, {60 * kMiB, 0, 7 * kMiB}, true);
  const DiffResult diff = Diff(nullptr, after);
  EXPECT_EQ(diff.rss.after_level.untracked, -37 * kMiB);
  EXPECT_EQ(diff.rss.adds_up_warning,
            "the RSS explanation of after.pb does not add up: tracked resident 90.0 MiB + "
            "allocator-held free 7.0 MiB exceed RssAnon+VmSwap 60.0 MiB by 37.0 MiB (a bug in "
            "the snapshot or in retain-diff: resident bytes are memory)");
  const std::string text = Text(diff);
  EXPECT_THAT(text, HasSubstr("+ untracked -37.0 MiB = RssAnon+VmSwap 60.0 MiB\n  warning     "
                              "the RSS explanation of after.pb does not add up"))
      << text;
  const std::string json = Json(diff);
  EXPECT_THAT(json, HasSubstr(",\"adds_up\":false}"));
  EXPECT_THAT(json, HasSubstr("\"warnings\":[\"the RSS explanation of after.pb does not add up"));
}

// A sampled snapshot's heap is an estimate: one that overshoots what is
// resident is still reported, as the estimate it is, not as a bug.
TEST_F(Residency, AnEstimateThatOvershootsIsNotCalledABug) {
  v1::Snapshot after = SnapshotOf(kBuffers, {60 * kMiB, 0, 7 * kMiB}, true);
  after.mutable_header()->set_sample_interval_bytes(512 * 1024);
  const DiffResult diff = Diff(nullptr, after);
  EXPECT_TRUE(diff.estimated);
  EXPECT_EQ(diff.rss.after_level.untracked, -37 * kMiB);
  EXPECT_EQ(diff.rss.adds_up_warning,
            "the RSS explanation of after.pb does not add up: tracked resident (estimated) 90.0 "
            "MiB + allocator-held free 7.0 MiB exceed RssAnon+VmSwap 60.0 MiB by 37.0 MiB (the "
            "heap's resident bytes are estimated from samples (RETAIN_SAMPLE): within their "
            "sampling error, not a bug)");
}

// A snapshot of an older shim: allocated bytes are all there is. One warning
// line, the old layout and the old numbers; nothing on standard error and
// no JSON warning (the end-to-end tests of real snapshots expect none).
TEST_F(Residency, WithoutResidencyTheMeasureFallsBackWithOneWarningLine) {
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, false);
  const DiffResult diff = Diff(nullptr, after);
  EXPECT_EQ(diff.measure.requested, Measure::kResident);
  EXPECT_EQ(diff.measure.used, Measure::kAllocated);
  EXPECT_FALSE(diff.measure.residency);
  EXPECT_EQ(diff.measure.fallback_warning,
            "resident bytes were not measured in after.pb (a shim before residency): counting "
            "allocated bytes, which include pages never touched");
  ASSERT_EQ(diff.rows.size(), 2u);
  EXPECT_EQ(diff.rows[0].owner.display, "compute-buffer");
  EXPECT_EQ(diff.rows[0].retained_bytes, 400 * kMiB);
  EXPECT_EQ(diff.total_retained_bytes, 450 * kMiB);
  EXPECT_EQ(FoldedSum(diff), 450 * kMiB);
  // Allocated tracked bytes exceed RssAnon+VmSwap (untouched pages): not a
  // bug under this measure, and not reported as one.
  EXPECT_EQ(diff.rss.untracked_growth, (152 - 450 - 7) * kMiB);
  EXPECT_EQ(diff.rss.adds_up_warning, "");

  const std::string text = Text(diff);
  EXPECT_THAT(text,
              HasSubstr("\n  warning     resident bytes were not measured in after.pb (a shim "
                        "before residency): counting allocated bytes, which include pages "
                        "never touched\n"));
  size_t warnings = 0;
  for (size_t at = text.find("warning"); at != std::string::npos;
       at = text.find("warning", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << text;
  EXPECT_THAT(text, HasSubstr("\n       live    count   share  owner (tag)\n"
                              "  400.0 MiB        1   88.9%  compute-buffer\n"
                              "   50.0 MiB        1   11.1%  prompt-cache\n"
                              "  450.0 MiB        2          total\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("\n  tracked     heap +450.0 MiB\n"));
  EXPECT_THAT(text, Not(HasSubstr("adds up")));
  const std::string json = Json(diff);
  EXPECT_THAT(json, HasSubstr(",\"measure\":\"allocated\",\"measure_requested\":\"resident\","
                              "\"residency_measured\":false,\"measure_fallback\":\"resident bytes "
                              "were not measured in after.pb"));
  EXPECT_THAT(json, HasSubstr("\"warnings\":[]}"));

  // Asked for allocated bytes: no warning, one line that says what there is.
  const std::string asked = Text(Diff(nullptr, after, Measure::kAllocated));
  EXPECT_THAT(asked,
              HasSubstr("\n  measure     allocated bytes (the snapshots have no residency)\n"));
  EXPECT_THAT(asked, Not(HasSubstr("warning")));

  // Two snapshots, one without residency: they cannot be compared in
  // resident bytes.
  const v1::Snapshot measured = SnapshotOf(kBuffers, kMemory, true, 2, 100);
  const v1::Snapshot old = SnapshotOf({kBuffers[0]}, kMemory, false, 1, 15);
  const DiffResult mixed = Diff(&old, measured);
  EXPECT_EQ(mixed.measure.used, Measure::kAllocated);
  EXPECT_THAT(mixed.measure.fallback_warning,
              StartsWith("resident bytes were not measured in before.pb (a shim"));
}

TEST_F(Residency, JsonFoldedAndPprofFollowTheMeasure) {
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, true);
  const DiffResult resident = Diff(nullptr, after);
  const DiffResult allocated = Diff(nullptr, after, Measure::kAllocated);

  const std::string json = Json(resident);
  EXPECT_THAT(json, HasSubstr(",\"measure\":\"resident\",\"measure_requested\":\"resident\","
                              "\"residency_measured\":true,\"measure_fallback\":null,"));
  EXPECT_THAT(json,
              HasSubstr(absl::StrCat("\"retained_bytes\":", 50 * kMiB,
                                     ",\"retained_count\":1,"
                                     "\"released_bytes\":0,\"released_count\":0,\"net_bytes\":",
                                     50 * kMiB, ",\"retained_allocated_bytes\":", 50 * kMiB,
                                     ",\"retained_resident_bytes\":", 48 * kMiB,
                                     ",\"retained_swapped_bytes\":", 2 * kMiB)));
  EXPECT_THAT(json, HasSubstr(absl::StrCat("\"total\":{\"retained_bytes\":", 90 * kMiB)));
  EXPECT_THAT(json, HasSubstr(absl::StrCat(
                        "{\"kind\":\"heap\",\"domain\":\"host\",\"live_bytes\":", 450 * kMiB,
                        ",\"live_count\":2,\"resident_bytes\":", 88 * kMiB,
                        ",\"swapped_bytes\":", 2 * kMiB, ",\"measured_bytes\":", 90 * kMiB, "}")));
  EXPECT_THAT(Json(allocated),
              HasSubstr(absl::StrCat("\"total\":{\"retained_bytes\":", 450 * kMiB)));

  EXPECT_EQ(FoldedSum(resident), 90 * kMiB);
  EXPECT_EQ(FoldedSum(allocated), 450 * kMiB);

  // pprof: allocated bytes and counts under the names pprof knows, resident
  // bytes as a third type; the default is the measure's.
  for (const DiffResult* diff : {&resident, &allocated}) {
    const ProfileSpec spec = DiffProfile(*diff);
    ASSERT_EQ(spec.sample_types.size(), 3u);
    EXPECT_EQ(spec.sample_types[0].first, "inuse_space");
    EXPECT_EQ(spec.sample_types[1].first, "inuse_objects");
    EXPECT_EQ(spec.sample_types[2].first, "inuse_resident_space");
    EXPECT_EQ(spec.default_sample_type, diff == &resident ? 2 : 0);
    int64_t space = 0, objects = 0, resident_space = 0;
    for (const ProfileSample& sample : spec.samples) {
      ASSERT_EQ(sample.values.size(), 3u);
      space += sample.values[0];
      objects += sample.values[1];
      resident_space += sample.values[2];
    }
    EXPECT_EQ(space, 450 * kMiB);
    EXPECT_EQ(objects, 2);
    EXPECT_EQ(resident_space, 90 * kMiB);
    absl::StatusOr<std::string> encoded = EncodePprof(spec, symbolizer_);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    pprof::Profile profile;
    ASSERT_TRUE(profile.ParseFromString(*encoded));
    EXPECT_EQ(profile.string_table(profile.default_sample_type()),
              diff == &resident ? "inuse_resident_space" : "inuse_space");
  }
  // Without residency: the two types of before, unchanged.
  const v1::Snapshot old = SnapshotOf(kBuffers, kMemory, false);
  const ProfileSpec spec = DiffProfile(Diff(nullptr, old));
  ASSERT_EQ(spec.sample_types.size(), 2u);
  EXPECT_EQ(spec.sample_types[0].first, "inuse_space");
  EXPECT_EQ(spec.default_sample_type, 0);
}

// Go's pprof reads the third sample type and its default.
TEST_F(Residency, GoPprofReadsTheResidentSampleType) {
  std::string go;
  for (const std::string dir : {"/usr/bin", "/usr/lib/go/bin", "/usr/local/go/bin"}) {
    if (access((dir + "/go").c_str(), X_OK) == 0) {
      go = dir + "/go";
      break;
    }
  }
  ASSERT_FALSE(go.empty()) << "install golang-go: it provides `go tool pprof`";
  const v1::Snapshot after = SnapshotOf(kBuffers, kMemory, true);
  test::TempDir home;
  const std::string path = home.path() + "/resident.pb.gz";
  ASSERT_TRUE(WritePprofFile(DiffProfile(Diff(nullptr, after)), symbolizer_, path).ok());
  test::RunOptions options;
  options.argv = {go, "tool", "pprof", "-raw", "-symbolize=none", path};
  options.env = {{"HOME", home.path()},
                 {"GOCACHE", home.path() + "/gocache"},
                 {"GOPATH", home.path() + "/gopath"},
                 {"GOPROXY", "off"},
                 {"GOTOOLCHAIN", "local"},
                 {"PPROF_TMPDIR", home.path()}};
  options.timeout_seconds = 60;
  const test::RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_THAT(run.stdout_data,
              HasSubstr("inuse_space/bytes inuse_objects/count inuse_resident_space/bytes[dflt]"))
      << run.stdout_data;
  // The buffer's sample: 400 MiB allocated, 1 object, 40 MiB resident.
  bool found = false;
  for (absl::string_view line : absl::StrSplit(run.stdout_data, '\n')) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() >= 3 && words[0] == absl::StrCat(400 * kMiB) && words[1] == "1" &&
        words[2] == absl::StrCat(40 * kMiB, ":")) {
      found = true;
    }
  }
  EXPECT_TRUE(found) << run.stdout_data;
}

TEST(MeasureFlagTest, ResidentOrAllocated) {
  DiffCommand command;
  command.paths = {"a.pb"};
  absl::StatusOr<DiffPlan> plan = PlanDiffCommand(command);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->measure, Measure::kResident);
  command.measure = "allocated";
  EXPECT_EQ(PlanDiffCommand(command)->measure, Measure::kAllocated);
  command.measure = "rss";
  EXPECT_EQ(PlanDiffCommand(command).status().message(),
            "--measure: 'rss' is not resident or allocated");
}

}  // namespace
}  // namespace retain::tool
