// Tests for tools/lib/snapshot_reader: snapshots are built in memory with the
// generated classes, serialized, and read back; every way a file can be
// refused must give a non-OK status whose one-line message names the problem.
#include "tools/lib/snapshot_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/kinds.h"
#include "retain.pb.h"
#include "tests/support/test_support.h"

namespace retain::tool {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Addresses 0x1000, 0x1010, 0x2000 (deltas 0x1000, 0x10, 0xff0); the middle
// allocation has no stack.
v1::Snapshot ValidSnapshot() {
  v1::Snapshot snapshot;
  v1::Header* header = snapshot.mutable_header();
  header->set_format_version(v1::FORMAT_VERSION_CURRENT);
  header->set_pid(42);
  snapshot.mutable_health()->set_arena_bytes(4096);  // the shim always writes it, last
  v1::Stack* stack = snapshot.add_stacks();
  stack->set_id(7);
  stack->add_frames(0x401000);
  v1::AllocationBlock* block = snapshot.add_allocations();
  for (uint64_t delta : {0x1000, 0x10, 0xff0}) block->add_address_delta(delta);
  for (uint64_t size : {16, 32, 4096}) block->add_size(size);
  block->add_kind(v1::KIND_HEAP);
  block->add_kind(v1::KIND_HEAP);
  block->add_kind(v1::KIND_MMAP_ANON);
  for (uint32_t id : {7, 0, 7}) block->add_stack_id(id);
  for (uint64_t seq : {1, 2, 3}) block->add_birth_sequence(seq);
  for (uint64_t us : {10, 20, 30}) block->add_birth_time_us(us);
  for (uint32_t tid : {100, 101, 100}) block->add_thread_id(tid);
  return snapshot;
}

absl::StatusOr<v1::Snapshot> RoundTrip(const v1::Snapshot& snapshot) {
  return ParseSnapshot(snapshot.SerializeAsString(), "test.pb");
}

// Every refusal: not OK, InvalidArgument, one line, names the input.
void ExpectRefused(const absl::StatusOr<v1::Snapshot>& result, const std::string& problem) {
  ASSERT_FALSE(result.ok()) << "accepted, expected: " << problem;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(problem));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("test.pb"));
  EXPECT_THAT(std::string(result.status().message()), Not(HasSubstr("\n")));
}

TEST(ParseSnapshotTest, AcceptsValidSnapshotAndDecodesAddressDeltas) {
  absl::StatusOr<v1::Snapshot> snapshot = RoundTrip(ValidSnapshot());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->header().pid(), 42u);

  std::vector<Allocation> rows = FlattenAllocations(*snapshot);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].address, 0x1000u);
  EXPECT_EQ(rows[1].address, 0x1010u);
  EXPECT_EQ(rows[2].address, 0x2000u);
  EXPECT_EQ(rows[2].size, 4096u);
  EXPECT_EQ(rows[2].kind, v1::KIND_MMAP_ANON);
  EXPECT_EQ(rows[1].stack_id, 0u);
  EXPECT_EQ(rows[2].birth_sequence, 3u);
  EXPECT_EQ(rows[1].birth_time_us, 20u);
  EXPECT_EQ(rows[1].thread_id, 101u);
  // Optional columns left empty mean zero.
  for (const Allocation& row : rows) {
    EXPECT_EQ(row.tag_id, 0u);
    EXPECT_EQ(row.flags, 0u);
  }
}

TEST(ParseSnapshotTest, EachBlockStartsFromAnAbsoluteAddress) {
  v1::Snapshot snapshot = ValidSnapshot();
  v1::AllocationBlock* second = snapshot.add_allocations();
  second->add_address_delta(0x7f0000000000);
  second->add_address_delta(0x40);
  second->add_size(1);
  second->add_size(2);
  second->add_kind(v1::KIND_HEAP);
  second->add_kind(v1::KIND_HEAP);
  second->add_stack_id(0);
  second->add_stack_id(7);
  second->add_birth_sequence(4);
  second->add_birth_sequence(5);
  second->add_birth_time_us(0);
  second->add_birth_time_us(0);
  second->add_thread_id(1);
  second->add_thread_id(1);
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::vector<uint64_t> addresses;
  for (const Allocation& row : FlattenAllocations(*parsed)) addresses.push_back(row.address);
  EXPECT_THAT(addresses, ElementsAre(0x1000, 0x1010, 0x2000, 0x7f0000000000, 0x7f0000000040));
}

TEST(ParseSnapshotTest, OptionalColumnsCarryTheirValuesWhenPresent) {
  v1::Snapshot snapshot = ValidSnapshot();
  v1::AllocationBlock* block = snapshot.mutable_allocations(0);
  for (uint32_t tag : {0, 5, 6}) block->add_tag_id(tag);
  for (uint64_t flags : {0x3, 0x0, 0x2203}) block->add_flags(flags);
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::vector<Allocation> rows = FlattenAllocations(*parsed);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].tag_id, 5u);
  EXPECT_EQ(rows[2].tag_id, 6u);
  EXPECT_EQ(rows[0].flags, 0x3u);
  EXPECT_EQ(rows[2].flags, 0x2203u);
}

// Residency (Header.residency_measured): resident and swapped bytes per row;
// without it (older shims) both are 0 and HasResidency says they mean nothing.
TEST(ParseSnapshotTest, ResidentAndSwappedBytesPerRow) {
  v1::Snapshot snapshot = ValidSnapshot();
  absl::StatusOr<v1::Snapshot> old = RoundTrip(snapshot);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(HasResidency(*old));
  for (const Allocation& row : FlattenAllocations(*old)) {
    EXPECT_EQ(row.resident_bytes, 0u);
    EXPECT_EQ(row.swapped_bytes, 0u);
  }
  snapshot.mutable_header()->set_residency_measured(true);
  v1::AllocationBlock* block = snapshot.mutable_allocations(0);
  for (uint64_t resident : {16, 0, 1024}) block->add_resident_bytes(resident);
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(HasResidency(*parsed));
  std::vector<Allocation> rows = FlattenAllocations(*parsed);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].resident_bytes, 16u);
  EXPECT_EQ(rows[2].resident_bytes, 1024u);
  EXPECT_EQ(rows[2].swapped_bytes, 0u);  // the column is empty: all 0
  for (uint64_t swapped : {0, 32, 2048}) block->add_swapped_bytes(swapped);
  parsed = RoundTrip(snapshot);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  rows = FlattenAllocations(*parsed);
  EXPECT_EQ(rows[1].swapped_bytes, 32u);
  EXPECT_EQ(rows[2].swapped_bytes, 2048u);
}

// A sampled heap row stands for size / recorded_size allocations: its
// resident and swapped bytes are scaled alike; other kinds are exact.
TEST(ParseSnapshotTest, SampledRowsScaleTheirResidency) {
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.mutable_header()->set_sample_interval_bytes(64);
  snapshot.mutable_header()->set_residency_measured(true);
  v1::AllocationBlock* block = snapshot.mutable_allocations(0);
  for (uint64_t resident : {16, 32, 4096}) block->add_resident_bytes(resident);
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::vector<Allocation> rows = FlattenAllocations(*parsed);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].size, SampledEstimate(16, 64));
  EXPECT_EQ(rows[0].resident_bytes, rows[0].size);  // fully resident stays fully resident
  EXPECT_EQ(rows[2].resident_bytes, 4096u);
}

TEST(ParseSnapshotTest, AcceptsSnapshotWithoutAllocations) {
  v1::Snapshot snapshot;
  snapshot.mutable_header()->set_format_version(v1::FORMAT_VERSION_CURRENT);
  snapshot.mutable_health();
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(FlattenAllocations(*parsed).empty());
}

TEST(ParseSnapshotTest, RefusesSnapshotCutBetweenTwoFields) {
  // Cut exactly at a field boundary the bytes still parse; the missing
  // health section (always written last) gives it away.
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.clear_health();
  ExpectRefused(RoundTrip(snapshot), "truncated");
}

TEST(ParseSnapshotTest, RefusesEmptyInput) { ExpectRefused(ParseSnapshot("", "test.pb"), "empty"); }

TEST(ParseSnapshotTest, RefusesBytesThatAreNotProtobuf) {
  // Field 1, length-delimited, claims 5 bytes but 2 follow.
  ExpectRefused(ParseSnapshot(std::string("\x0a\x05"
                                          "ab",
                                          4),
                              "test.pb"),
                "not a valid protobuf");
  // A wire type that does not exist (7).
  ExpectRefused(ParseSnapshot(std::string("\x0f\x01", 2), "test.pb"), "not a valid protobuf");
}

TEST(ParseSnapshotTest, RefusesTruncatedSnapshot) {
  std::string bytes = ValidSnapshot().SerializeAsString();
  // Cutting the last byte always leaves an incomplete field; the header
  // (written first) is whole, so the reader can tell the file was cut.
  ExpectRefused(ParseSnapshot(bytes.substr(0, bytes.size() - 1), "test.pb"),
                absl::StrCat("test.pb: truncated snapshot (", bytes.size() - 1, " of at least ",
                             bytes.size(), " bytes: the file ends inside a field)"));
  // Cut inside the header itself: nothing says what it was.
  ExpectRefused(ParseSnapshot(bytes.substr(0, 3), "test.pb"), "not a retain snapshot");
}

TEST(ParseSnapshotTest, RefusesTextFile) {
  ExpectRefused(ParseSnapshot("hello, this is a text file\n", "test.pb"), "not a retain snapshot");
}

TEST(ParseSnapshotTest, KeepsPathsAndArgumentsThatAreNotUtf8AsBytes) {
  // The shim writes paths and argv as the kernel hands them over; the schema
  // makes them bytes so nothing is refused or rewritten.
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.mutable_header()->set_exe_path("/srv/caf\xe9/server");  // Latin-1 name
  snapshot.mutable_header()->add_command_line("--x=\xff");
  v1::Module* module = snapshot.add_modules();
  module->set_id(1);
  module->set_path("/lib/lib\xc3(.so");
  testing::internal::CaptureStderr();
  absl::StatusOr<v1::Snapshot> parsed = ParseSnapshot(snapshot.SerializeAsString(), "test.pb");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->header().exe_path(), "/srv/caf\xe9/server");
  EXPECT_EQ(parsed->header().command_line(0), "--x=\xff");
  EXPECT_EQ(parsed->modules(0).path(), "/lib/lib\xc3(.so");
}

TEST(ParseSnapshotTest, RefusesProtobufWithoutHeader) {
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.clear_header();
  ExpectRefused(RoundTrip(snapshot), "not a retain snapshot");
}

TEST(ParseSnapshotTest, RefusesHeaderWithoutFormatVersion) {
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.mutable_header()->set_format_version(0);
  ExpectRefused(RoundTrip(snapshot), "not a retain snapshot");
}

TEST(ParseSnapshotTest, RefusesNewerFormatNamingBothVersions) {
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.mutable_header()->set_format_version(v1::FORMAT_VERSION_CURRENT + 1);
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ExpectRefused(parsed, "written by a newer retain");
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr(absl::StrCat("format ", v1::FORMAT_VERSION_CURRENT + 1,
                                     ", this reader knows ", v1::FORMAT_VERSION_CURRENT)));
}

// Adds one extra value to one column, by name.
void GrowColumn(v1::AllocationBlock* block, const std::string& column) {
  if (column == "size") block->add_size(1);
  if (column == "kind") block->add_kind(v1::KIND_HEAP);
  if (column == "stack_id") block->add_stack_id(0);
  if (column == "birth_sequence") block->add_birth_sequence(1);
  if (column == "birth_time_us") block->add_birth_time_us(1);
  if (column == "thread_id") block->add_thread_id(1);
  if (column == "tag_id") block->add_tag_id(1);
  if (column == "flags") block->add_flags(1);
  if (column == "resident_bytes") block->add_resident_bytes(1);
  if (column == "swapped_bytes") block->add_swapped_bytes(1);
}

TEST(ParseSnapshotTest, RefusesRequiredColumnOfWrongLengthNamingIt) {
  for (const std::string column :
       {"size", "kind", "stack_id", "birth_sequence", "birth_time_us", "thread_id"}) {
    SCOPED_TRACE(column);
    v1::Snapshot snapshot = ValidSnapshot();
    GrowColumn(snapshot.mutable_allocations(0), column);
    absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
    ExpectRefused(parsed, absl::StrCat("column ", column, " has 4 values"));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("allocation block 0"));
  }
}

TEST(ParseSnapshotTest, RefusesShortRequiredColumn) {
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.mutable_allocations(0)->mutable_size()->RemoveLast();
  ExpectRefused(RoundTrip(snapshot), "column size has 2 values but address_delta has 3");
}

TEST(ParseSnapshotTest, RefusesOptionalColumnThatIsNeitherEmptyNorFull) {
  for (const std::string column : {"tag_id", "flags", "resident_bytes", "swapped_bytes"}) {
    SCOPED_TRACE(column);
    v1::Snapshot snapshot = ValidSnapshot();
    GrowColumn(snapshot.mutable_allocations(0), column);  // 1 value for 3 rows
    ExpectRefused(RoundTrip(snapshot), absl::StrCat("column ", column, " has 1 values"));
  }
}

TEST(ParseSnapshotTest, RefusesBadColumnInLaterBlockNamingTheBlock) {
  v1::Snapshot snapshot = ValidSnapshot();
  *snapshot.add_allocations() = snapshot.allocations(0);
  snapshot.mutable_allocations(1)->add_thread_id(9);
  ExpectRefused(RoundTrip(snapshot), "allocation block 1: column thread_id");
}

TEST(ParseSnapshotTest, RefusesReferenceToMissingStack) {
  v1::Snapshot snapshot = ValidSnapshot();
  snapshot.mutable_allocations(0)->set_stack_id(2, 99);
  absl::StatusOr<v1::Snapshot> parsed = RoundTrip(snapshot);
  ExpectRefused(parsed, "stack 99");
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("row 2"));
}

TEST(ReadSnapshotFileTest, ReadsFileWrittenToDisk) {
  test::TempDir dir;
  const std::string path = dir.path() + "/one.pb";
  {
    std::ofstream out(path, std::ios::binary);
    out << ValidSnapshot().SerializeAsString();
  }
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(FlattenAllocations(*snapshot).size(), 3u);
}

TEST(ReadSnapshotFileTest, MissingFileIsNotFound) {
  test::TempDir dir;
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(dir.path() + "/absent.pb");
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(snapshot.status().message()), HasSubstr("absent.pb"));
}

TEST(ReadSnapshotFileTest, DirectoryIsRefused) {
  test::TempDir dir;
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(dir.path());
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(snapshot.status().message()), HasSubstr("directory"));
}

TEST(ReadSnapshotFileTest, EmptyFileIsRefused) {
  test::TempDir dir;
  const std::string path = dir.path() + "/empty.pb";
  std::ofstream(path).close();
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_THAT(std::string(snapshot.status().message()), HasSubstr("empty file"));
  EXPECT_THAT(std::string(snapshot.status().message()), HasSubstr(path));
}

TEST(ReadSnapshotFileTest, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  test::TempDir dir;
  const std::string path = dir.path() + "/secret.pb";
  std::ofstream(path) << "x";
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kPermissionDenied);
}

// ---------------------------------------------------------------------------
// The footer, on real snapshots written by the shim (tests/fuzz/corpus-snapshot,
// README.md there): new-*.pb end with a footer, old-*.pb were written before
// it existed.

std::string CorpusFile(const std::string& name) {
  std::ifstream in(test::SourceRoot() + "/tests/fuzz/corpus-snapshot/" + name, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(bytes.empty()) << name;
  return bytes;
}

const char* const kNewSnapshots[] = {"new-diff_server-1.pb",   "new-diff_server-14.pb",
                                     "new-tags_marker_api.pb", "new-snapshot_fields.pb",
                                     "new-proc_true.pb",       "new-acct_many-degraded.pb"};
const char* const kOldSnapshots[] = {"old-diff_server-1.pb",   "old-diff_server-14.pb",
                                     "old-tags_marker_api.pb", "old-snapshot_fields.pb",
                                     "old-proc_true.pb",       "old-acct_many-degraded.pb"};

TEST(FooterTest, SnapshotsOfThisShimCarryAFooterThatChecksOut) {
  for (const char* name : kNewSnapshots) {
    SCOPED_TRACE(name);
    const std::string bytes = CorpusFile(name);
    absl::StatusOr<v1::Snapshot> snapshot = ParseSnapshot(bytes, name);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    EXPECT_TRUE(snapshot->header().ends_with_footer());
    ASSERT_TRUE(snapshot->has_footer());
    EXPECT_EQ(snapshot->footer().length(), bytes.size() - 16);
    EXPECT_EQ(snapshot->footer().crc32(), SnapshotCrc32(bytes.substr(0, bytes.size() - 16)));
    EXPECT_FALSE(FlattenAllocations(*snapshot).empty());
  }
}

TEST(FooterTest, SnapshotsOfOlderShimsWithoutFooterStillRead) {
  for (const char* name : kOldSnapshots) {
    SCOPED_TRACE(name);
    absl::StatusOr<v1::Snapshot> snapshot = ParseSnapshot(CorpusFile(name), name);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    EXPECT_FALSE(snapshot->header().ends_with_footer());
    EXPECT_FALSE(snapshot->has_footer());
    EXPECT_FALSE(FlattenAllocations(*snapshot).empty());
  }
}

TEST(FooterTest, Crc32IsZlibsCrc32) {
  // The check value of CRC-32/ISO-HDLC.
  EXPECT_EQ(SnapshotCrc32("123456789"), 0xcbf43926u);
  EXPECT_EQ(SnapshotCrc32(""), 0u);
}

// One flipped bit anywhere in the file: before the footer the CRC no longer
// matches; in the footer's length or CRC they no longer agree with the
// file; in its fixed bytes the footer is no longer there. No variant reads.
TEST(FooterTest, EveryFlippedByteIsCorruption) {
  const std::string bytes = CorpusFile("new-diff_server-14.pb");
  const size_t body = bytes.size() - 16;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (char bit : {'\x01', '\x80'}) {
      std::string damaged = bytes;
      damaged[i] ^= bit;
      absl::StatusOr<v1::Snapshot> parsed = ParseSnapshot(damaged, "test.pb");
      ASSERT_FALSE(parsed.ok()) << "byte " << i << " flipped was accepted";
      const std::string message(parsed.status().message());
      if (i < body) {
        ASSERT_EQ(message,
                  "test.pb: corrupted snapshot (CRC mismatch: the file was modified or damaged)")
            << "byte " << i;
      } else if (i >= body + 3 && i < body + 11) {  // Footer.length
        ASSERT_THAT(message, HasSubstr("test.pb: corrupted snapshot (its footer counts "))
            << "byte " << i;
        ASSERT_THAT(message, HasSubstr(absl::StrCat("but ", body, " precede it)")));
      } else if (i >= body + 12) {  // Footer.crc32
        ASSERT_THAT(message, HasSubstr("CRC mismatch")) << "byte " << i;
      } else {  // the footer's fixed bytes: 0x7a 0x0e 0x09 ... 0x15
        ASSERT_EQ(message, "test.pb: corrupted snapshot (its footer is damaged)") << "byte " << i;
      }
    }
  }
}

// Every cut: named as a truncation once the header is in, and never read.
TEST(FooterTest, EveryCutIsTruncation) {
  const std::string bytes = CorpusFile("new-diff_server-14.pb");
  v1::Snapshot whole;
  ASSERT_TRUE(whole.ParseFromString(bytes));
  // The header is written first: its tag, its length (a varint), itself.
  const size_t header_size = whole.header().ByteSizeLong();
  const size_t header_end = 1 + (header_size < 128 ? 1 : 2) + header_size;
  ASSERT_LT(header_size, 16384u);
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    absl::StatusOr<v1::Snapshot> parsed = ParseSnapshot(bytes.substr(0, cut), "test.pb");
    ASSERT_FALSE(parsed.ok()) << "cut at " << cut << " was accepted";
    if (cut < header_end) continue;  // no header: "not a retain snapshot"
    ASSERT_THAT(std::string(parsed.status().message()),
                testing::StartsWith(absl::StrCat("test.pb: truncated snapshot (", cut)))
        << "cut at " << cut;
  }
  // The footer alone missing (the file is otherwise whole).
  ExpectRefused(ParseSnapshot(bytes.substr(0, bytes.size() - 16), "test.pb"),
                absl::StrCat("test.pb: truncated snapshot (", bytes.size() - 16,
                             " bytes: the footer the shim writes last is missing)"));
}

TEST(FooterTest, FooterThatIsNotTheFilesOwnIsCorruption) {
  const std::string bytes = CorpusFile("new-proc_true.pb");
  // Two snapshots in one file: the last footer counts only its own file.
  ExpectRefused(ParseSnapshot(bytes + bytes, "test.pb"),
                absl::StrCat("test.pb: corrupted snapshot (its footer counts ", bytes.size() - 16,
                             " bytes before it, but ", 2 * bytes.size() - 16, " precede it)"));
  // A footer followed by more bytes (an unknown field 9) is not the file's
  // last 16 bytes, in a file whose header does not promise one.
  v1::Snapshot snapshot;
  ASSERT_TRUE(snapshot.ParseFromString(bytes));
  snapshot.mutable_header()->set_ends_with_footer(false);
  ExpectRefused(ParseSnapshot(snapshot.SerializeAsString() + "\x48\x01", "test.pb"),
                "test.pb: corrupted snapshot (a footer that is not at the end of the file)");
}

// ---------------------------------------------------------------------------
// Bounded reads of files.

TEST(ReadSnapshotFileTest, ReadsRealSnapshotWithFooter) {
  test::TempDir dir;
  const std::string path = dir.path() + "/real.pb";
  std::ofstream(path, std::ios::binary) << CorpusFile("new-diff_server-14.pb");
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(snapshot->has_footer());
}

// Before: open() waited for a writer, forever.
TEST(ReadSnapshotFileTest, FifoIsRefusedWithoutWaitingForAWriter) {
  test::TempDir dir;
  const std::string path = dir.path() + "/pipe.pb";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  alarm(60);  // a hang fails the test (SIGALRM) instead of blocking ctest
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path);
  alarm(0);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(),
            absl::StrCat(path,
                         ": is a FIFO (named pipe), not a regular file; to read a snapshot "
                         "from a pipe, give - and pipe it to standard input"));
}

// Before: read until bad_alloc.
TEST(ReadSnapshotFileTest, CharacterDeviceIsRefusedWithoutReading) {
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile("/dev/zero");
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(snapshot.status().message(), "/dev/zero: is a character device, not a regular file");
}

// A sparse file: 1 GiB + 1 byte on paper, nothing on disk. Before, it was
// read whole (1 GiB of zeros in memory) and then refused by the parser.
TEST(ReadSnapshotFileTest, FileLargerThanTheMaximumIsRefusedBeforeReading) {
  test::TempDir dir;
  const std::string path = dir.path() + "/huge.pb";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kDefaultMaxSnapshotBytes + 1)), 0);
  close(fd);
  absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(),
            absl::StrCat(path,
                         ": 1073741825 bytes (1.0 GiB) is larger than the largest snapshot read "
                         "(1.0 GiB; --max-snapshot-size raises it)"));

  // The maximum is the caller's: a real snapshot over a small one is refused.
  const std::string real = dir.path() + "/real.pb";
  std::ofstream(real, std::ios::binary) << CorpusFile("new-proc_true.pb");
  ReadOptions options;
  options.max_bytes = 1000;
  snapshot = ReadSnapshotFile(real, options);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(),
            absl::StrCat(real,
                         ": 1020 bytes (1020 B) is larger than the largest snapshot read "
                         "(1000 B; --max-snapshot-size raises it)"));
  options.max_bytes = 1020;
  EXPECT_TRUE(ReadSnapshotFile(real, options).ok());
}

TEST(FindStackTest, FindsByIdOrReturnsNull) {
  v1::Snapshot snapshot = ValidSnapshot();
  ASSERT_NE(FindStack(snapshot, 7), nullptr);
  EXPECT_EQ(FindStack(snapshot, 7)->frames(0), 0x401000u);
  EXPECT_EQ(FindStack(snapshot, 8), nullptr);
  EXPECT_EQ(FindStack(snapshot, 0), nullptr);
}

TEST(Utf8SequenceLengthTest, AcceptsValidAndRejectsInvalidSequences) {
  EXPECT_EQ(Utf8SequenceLength("a", 0), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xc3\xa9", 0), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xe2\x82\xac", 0), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xf0\x9f\x98\x80", 0), 4u);
  EXPECT_EQ(Utf8SequenceLength("x\xc3\xa9", 1), 2u);
  EXPECT_EQ(Utf8SequenceLength("\x80", 0), 0u);              // continuation byte alone
  EXPECT_EQ(Utf8SequenceLength("\xc0\xaf", 0), 0u);          // overlong
  EXPECT_EQ(Utf8SequenceLength("\xe0\x80\xaf", 0), 0u);      // overlong
  EXPECT_EQ(Utf8SequenceLength("\xed\xa0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(Utf8SequenceLength("\xf4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8SequenceLength("\xe2\x82", 0), 0u);          // cut short
  EXPECT_EQ(Utf8SequenceLength("\xff", 0), 0u);
}

TEST(KindNameTest, NamesEveryKind) {
  EXPECT_EQ(KindName(v1::KIND_UNSPECIFIED), "unspecified");
  EXPECT_EQ(KindName(v1::KIND_HEAP), "heap");
  EXPECT_EQ(KindName(v1::KIND_MMAP_ANON), "mmap-anon");
  EXPECT_EQ(KindName(v1::KIND_MMAP_FILE), "mmap-file");
  EXPECT_EQ(KindName(v1::KIND_HIP_DEVICE), "hip-device");
  EXPECT_EQ(KindName(v1::KIND_HIP_HOST), "hip-host");
  EXPECT_EQ(KindName(v1::KIND_HIP_MANAGED), "hip-managed");
  EXPECT_EQ(KindName(v1::KIND_VULKAN_DEVICE), "vulkan-device");
  EXPECT_EQ(KindName(v1::KIND_CUDA_DEVICE), "cuda-device");
  EXPECT_EQ(KindName(v1::KIND_CUDA_HOST), "cuda-host");
  EXPECT_EQ(KindName(v1::KIND_CUDA_MANAGED), "cuda-managed");
  EXPECT_EQ(KindName(v1::KIND_METAL), "metal");
  EXPECT_EQ(KindName(static_cast<v1::Kind>(77)), "kind-77");
}

// proto/kinds.h, the table the names come from, against the generated enum:
// every row's number is its proto enumerator's (also checked at compile time
// in snapshot_reader.cc), and every enumerator has a row.
TEST(KindNameTest, TheKindsTableIsTheProtoEnum) {
  const google::protobuf::EnumDescriptor* kinds = v1::Kind_descriptor();
  int rows = 0;
#define RETAIN_CHECK_KIND_ROW(shim, proto, value, name)                 \
  ++rows;                                                               \
  ASSERT_NE(kinds->FindValueByName(#proto), nullptr) << #proto;         \
  EXPECT_EQ(kinds->FindValueByName(#proto)->number(), value) << #proto; \
  EXPECT_EQ(KindName(v1::proto), name);
  RETAIN_FOR_EACH_KIND(RETAIN_CHECK_KIND_ROW)
#undef RETAIN_CHECK_KIND_ROW
  EXPECT_EQ(rows, kinds->value_count());
}

}  // namespace
}  // namespace retain::tool
