// The mmap family under the shim (fixture acct_mmap): one row per mapped
// range with kind and flags, partial munmap trimming and splitting, mremap
// in place and moving, MAP_FIXED replacing, mmap64; and glibc's own mmap of
// a large malloc chunk not counted as mmap.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

// One run of acct_mmap under the shim.
struct MmapRun {
  RunResult run;
  v1::Snapshot mapped;    // "mmap": after every scenario
  v1::Snapshot malloc64;  // "malloc64": after malloc(64 MiB)
};

MmapRun RunMmap(const TempDir& dir) {
  MmapRun r;
  r.run = RunFixture("acct_mmap", {dir.path() + "/scratch"}, dir.path());
  if (r.run.exit_code != 0) {
    ADD_FAILURE() << Describe(r.run);
    return r;
  }
  r.mapped = SnapshotLabeled(dir.path(), "mmap");
  r.malloc64 = SnapshotLabeled(dir.path(), "malloc64");
  return r;
}

bool IsMmap(v1::Kind kind) { return kind == v1::KIND_MMAP_ANON || kind == v1::KIND_MMAP_FILE; }

// A "row SCENARIO NAME ADDR SIZE KIND PROT FLAGS" line of the fixture.
struct ExpectedRow {
  std::string scenario;
  std::string name;
  uint64_t address;
  uint64_t size;
  v1::Kind kind;
  bool check_flags;
  uint64_t flags;  // prot | (flags << 8), as the contract defines the column
  int order;       // index of the scenario in the fixture's run
};

// A "region SCENARIO NAME ADDR SIZE" line.
struct ExpectedRegion {
  std::string scenario;
  std::string name;
  Range range;
  int order;
};

// The fixture's expectations, scenarios numbered in the order they ran.
struct Expectations {
  std::vector<std::string> scenarios;
  std::vector<ExpectedRow> rows;
  std::vector<ExpectedRegion> regions;
};

Expectations ParseExpectations(const FixtureOutput& out) {
  Expectations e;
  auto order_of = [&](const std::string& scenario) {
    const auto it = std::find(e.scenarios.begin(), e.scenarios.end(), scenario);
    if (it != e.scenarios.end()) return static_cast<int>(it - e.scenarios.begin());
    e.scenarios.push_back(scenario);
    return static_cast<int>(e.scenarios.size() - 1);
  };
  for (const auto& f : out.All("region")) {
    if (f.size() != 4) {
      ADD_FAILURE() << "bad region line";
      continue;
    }
    const uint64_t begin = ParseNumber(f[2]);
    e.regions.push_back({f[0], f[1], Range{begin, begin + ParseNumber(f[3])}, order_of(f[0])});
  }
  for (const auto& f : out.All("row")) {
    if (f.size() != 7) {
      ADD_FAILURE() << "bad row line";
      continue;
    }
    ExpectedRow row{f[0],
                    f[1],
                    ParseNumber(f[2]),
                    ParseNumber(f[3]),
                    f[4] == "file" ? v1::KIND_MMAP_FILE : v1::KIND_MMAP_ANON,
                    f[5] != "-",
                    0,
                    order_of(f[0])};
    if (row.check_flags) row.flags = ParseNumber(f[5]) | (ParseNumber(f[6]) << 8);
    e.rows.push_back(row);
  }
  return e;
}

// Checks `snapshot` against the expectations of scenarios 0..last: each
// expected row is there exactly (address, size, kind, flags), and over each
// region the mmap rows are exactly the expected ones (nothing left of a
// trimmed page, an old mremap range or a replaced part). A later scenario
// may reuse a range an earlier one gave back, so rows of every scenario up
// to `last` count.
void CheckScenarios(const v1::Snapshot& snapshot, const Expectations& e, int last,
                    const std::string& where) {
  const std::map<uint64_t, Allocation> rows = RowsByAddress(snapshot);
  for (const ExpectedRow& want : e.rows) {
    if (want.order > last) continue;
    const std::string name = where + ": " + want.scenario + "/" + want.name;
    const auto it = rows.find(want.address);
    if (it == rows.end()) {
      ADD_FAILURE() << name << ": no row at 0x" << std::hex << want.address;
      continue;
    }
    EXPECT_EQ(it->second.size, want.size) << name;
    EXPECT_EQ(it->second.kind, want.kind) << name;
    if (want.check_flags) {
      EXPECT_EQ(it->second.flags, want.flags)
          << name << std::hex << ": flags 0x" << it->second.flags << " want 0x" << want.flags;
    }
  }
  for (const ExpectedRegion& region : e.regions) {
    if (region.order > last) continue;
    auto overlaps = [&](uint64_t address, uint64_t size) {
      return address < region.range.end && region.range.begin < address + size;
    };
    std::set<std::pair<uint64_t, uint64_t>> found, want;
    for (const Allocation& row : Rows(snapshot)) {
      if (IsMmap(row.kind) && overlaps(row.address, row.size)) {
        found.insert({row.address, row.size});
      }
    }
    for (const ExpectedRow& row : e.rows) {
      if (row.order <= last && overlaps(row.address, row.size)) {
        want.insert({row.address, row.size});
      }
    }
    EXPECT_EQ(found, want) << where << ": region " << region.scenario << "/" << region.name;
  }
}

// Proves: every scenario leaves exactly the rows the kernel's view implies,
// born during that scenario, checked in the snapshot taken right after it
// and again in the final one:
// anonymous and file-backed mappings with their kinds and flags column,
// front/back trims, a middle munmap split into two rows, mremap grown in
// place and moved (the old range has no row), MAP_FIXED replacing part or
// all of a mapping, and mmap64.
TEST(AcctMmap, EveryScenarioLeavesExactlyItsRows) {
  TempDir dir;
  const MmapRun r = RunMmap(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const FixtureOutput out(r.run.stdout_data);
  const Expectations e = ParseExpectations(out);

  std::set<std::string> names;
  for (const ExpectedRow& row : e.rows) names.insert(row.scenario + "/" + row.name);
  const std::set<std::string> required = {
      "anon/anon",       "file/shared",      "file/private",     "trim_front/rest",
      "trim_back/rest",  "split/low",        "split/high",       "grow_in_place/grown",
      "move/new",        "fixed_middle/low", "fixed_middle/new", "fixed_middle/high",
      "fixed_whole/new", "mmap64/mapped"};
  for (const std::string& name : required) EXPECT_EQ(names.count(name), 1u) << name;
  // The guard page of the move scenario exists unless the page was taken.
  EXPECT_EQ(names.size(), required.size() + names.count("move/guard"));
  ASSERT_EQ(e.scenarios.size(), 10u);

  uint64_t previous_next_birth = 0;
  for (size_t i = 0; i < e.scenarios.size(); ++i) {
    const v1::Snapshot snapshot = SnapshotLabeled(dir.path(), e.scenarios[i]);
    CheckScenarios(snapshot, e, static_cast<int>(i), e.scenarios[i]);
    // The scenario's rows (mremap results included) were born during it:
    // after the previous scenario's snapshot, before its own.
    const std::map<uint64_t, Allocation> rows = RowsByAddress(snapshot);
    for (const ExpectedRow& want : e.rows) {
      if (want.order != static_cast<int>(i) || rows.count(want.address) == 0) continue;
      const uint64_t birth = rows.at(want.address).birth_sequence;
      EXPECT_GE(birth, previous_next_birth) << want.scenario << "/" << want.name;
      EXPECT_LT(birth, snapshot.header().next_birth_sequence())
          << want.scenario << "/" << want.name;
    }
    previous_next_birth = snapshot.header().next_birth_sequence();
  }
  CheckScenarios(r.mapped, e, static_cast<int>(e.scenarios.size()), "final");

  const std::vector<std::string> moved = out.All("moved").at(0);
  EXPECT_NE(moved.at(0), moved.at(1)) << "mremap(MREMAP_MAYMOVE) did not have to move";
}

// Proves: per-kind totals equal the sum of that kind's rows, for both mmap
// kinds and the heap.
TEST(AcctMmap, TotalsEqualRows) {
  TempDir dir;
  const MmapRun r = RunMmap(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  for (const v1::Kind kind : {v1::KIND_MMAP_ANON, v1::KIND_MMAP_FILE, v1::KIND_HEAP}) {
    for (const v1::Snapshot* s : {&r.mapped, &r.malloc64}) {
      const v1::KindTotals totals = TotalsFor(*s, kind);
      EXPECT_EQ(totals.live_bytes(), LiveBytes(*s, kind)) << tool::KindName(kind);
      EXPECT_EQ(totals.live_count(), LiveCount(*s, kind)) << tool::KindName(kind);
    }
  }
  // The fixture's two file mappings (5 + 2 pages) are counted.
  const uint64_t page = FixtureOutput(r.run.stdout_data).Number("page");
  EXPECT_GE(TotalsFor(r.mapped, v1::KIND_MMAP_FILE).live_bytes(), 7 * page);
}

// Proves: malloc(64 MiB), which glibc serves with its own internal mmap, is
// one heap row of 64 MiB and changes no mmap total.
TEST(AcctMmap, LargeMallocIsOneHeapRowNotMmap) {
  TempDir dir;
  const MmapRun r = RunMmap(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const uint64_t big = FixtureOutput(r.run.stdout_data).Number("big");
  const std::map<uint64_t, Allocation> rows = RowsByAddress(r.malloc64);
  const auto it = rows.find(big);
  ASSERT_NE(it, rows.end()) << "no row for malloc(64 MiB)";
  EXPECT_EQ(it->second.kind, v1::KIND_HEAP);
  EXPECT_EQ(it->second.size, uint64_t{64} << 20);
  for (const Allocation& row : Rows(r.malloc64)) {
    if (IsMmap(row.kind)) {
      EXPECT_FALSE(row.address <= big && big < row.address + row.size)
          << "the 64 MiB chunk is also counted as an mmap row";
    }
  }

  for (const v1::Kind kind : {v1::KIND_MMAP_ANON, v1::KIND_MMAP_FILE}) {
    const v1::KindTotals before = TotalsFor(r.mapped, kind);
    const v1::KindTotals after = TotalsFor(r.malloc64, kind);
    EXPECT_EQ(after.allocated_bytes(), before.allocated_bytes()) << tool::KindName(kind);
    EXPECT_EQ(after.allocated_count(), before.allocated_count()) << tool::KindName(kind);
    EXPECT_EQ(after.live_bytes(), before.live_bytes()) << tool::KindName(kind);
    EXPECT_EQ(after.freed_bytes(), before.freed_bytes()) << tool::KindName(kind);
  }
  const v1::KindTotals heap_before = TotalsFor(r.mapped, v1::KIND_HEAP);
  const v1::KindTotals heap_after = TotalsFor(r.malloc64, v1::KIND_HEAP);
  EXPECT_EQ(heap_after.allocated_count() - heap_before.allocated_count(), 1u);
  EXPECT_EQ(heap_after.allocated_bytes() - heap_before.allocated_bytes(), uint64_t{64} << 20);
}

}  // namespace
}  // namespace retain::test::acct
