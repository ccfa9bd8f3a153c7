// End-to-end tests of retain-diff on bad input: every case gets exactly one
// line on stderr starting "retain-diff: " that says what is wrong, exit
// code 2, nothing on stdout, and never a crash (no signal, no "terminate",
// no "Segmentation"). The inputs are made from real snapshots (fixture
// diff_server under libretain.so): emptied, cut in half, replaced by random
// bytes, re-serialized with format_version 99 through the generated classes,
// another protobuf message (retain.v1.Rules), snapshots of two unrelated
// programs (diff_unrelated) without --force; and bad command lines.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "rules.pb.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// Offsets in a serialized message where a top-level field starts or the
// message ends: a cut there leaves a shorter but well-formed message.
std::set<size_t> FieldBoundaries(const std::string& bytes) {
  std::set<size_t> boundaries = {0};
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag)) break;
    boundaries.insert(static_cast<size_t>(in.CurrentPosition()));
  }
  return boundaries;
}

// A real run of diff_server and one of diff_unrelated.
class DiffBadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerRun(RunServer("diff_server"));
    unrelated_dir_ = new TempDir();
    RunOptions options;
    options.argv = {FixturePath("diff_unrelated")};
    options.env["RETAIN_DIR"] = unrelated_dir_->path();
    options.preload = true;
    options.timeout_seconds = 60;
    unrelated_run_ = new RunResult(::retain::test::Run(options));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete unrelated_dir_;
    delete unrelated_run_;
  }
  void SetUp() override {
    ASSERT_TRUE(RunComplete(*server_)) << server_->Describe();
    ASSERT_EQ(unrelated_run_->exit_code, 0) << Describe(*unrelated_run_);
    for (const std::string& path : ListSnapshots(unrelated_dir_->path())) {
      if (LoadSnapshot(path).header().label() == "unrelated") unrelated_ = path;
    }
    ASSERT_FALSE(unrelated_.empty()) << "no snapshot labelled \"unrelated\"";
  }

  // A real snapshot: iter-12 of diff_server.
  static std::string Real() { return server_->Snapshot(kIterations); }

  // Runs retain-diff with `args` and checks the bad-input contract; the
  // one stderr line must contain `expected`.
  static void ExpectRejected(const std::vector<std::string>& args, const std::string& expected) {
    const RunResult result = RunDiff(args);
    const std::string context =
        absl::StrCat("retain-diff ", absl::StrJoin(args, " "), "\n", Describe(result));
    EXPECT_EQ(result.term_signal, 0) << context;
    EXPECT_FALSE(result.timed_out) << context;
    EXPECT_EQ(result.exit_code, 2) << context;
    EXPECT_EQ(result.stdout_data, "") << context;
    EXPECT_THAT(result.stderr_data, StartsWith("retain-diff: ")) << context;
    EXPECT_TRUE(absl::EndsWith(result.stderr_data, "\n")) << context;
    EXPECT_EQ(std::count(result.stderr_data.begin(), result.stderr_data.end(), '\n'), 1)
        << "exactly one line\n"
        << context;
    EXPECT_THAT(result.stderr_data, HasSubstr(expected)) << context;
    for (const char* crash : {"terminate", "Segmentation", "Aborted", "core dumped"}) {
      EXPECT_THAT(result.stderr_data, ::testing::Not(HasSubstr(crash))) << context;
    }
  }

  TempDir dir_;
  std::string unrelated_;
  static ServerRun* server_;
  static TempDir* unrelated_dir_;
  static RunResult* unrelated_run_;
};
ServerRun* DiffBadInputTest::server_ = nullptr;
TempDir* DiffBadInputTest::unrelated_dir_ = nullptr;
RunResult* DiffBadInputTest::unrelated_run_ = nullptr;

TEST_F(DiffBadInputTest, EmptyFile) {
  const std::string empty = WriteFile(dir_.path() + "/empty.pb", "");
  ExpectRejected({empty}, "empty.pb: empty file");
  ExpectRejected({Real(), empty}, "empty.pb: empty file");
}

// Cut in half (moved past a field boundary if the half falls on one, where
// the rest would be a shorter but well-formed message). Before the footer,
// this was "not a retain snapshot: not a valid protobuf message".
TEST_F(DiffBadInputTest, TruncatedSnapshot) {
  const std::string bytes = ReadFile(Real());
  ASSERT_GT(bytes.size(), 100u);
  const std::set<size_t> boundaries = FieldBoundaries(bytes);
  size_t cut = bytes.size() / 2;
  while (boundaries.count(cut)) ++cut;
  const std::string half = WriteFile(dir_.path() + "/half.pb", bytes.substr(0, cut));
  const std::string expected = absl::StrCat("half.pb: truncated snapshot (", cut, " of at least ");
  ExpectRejected({half}, expected);
  ExpectRejected({server_->Snapshot(0), half}, expected);
  // Only the footer cut off: the rest is a well-formed snapshot.
  const std::string no_footer =
      WriteFile(dir_.path() + "/no_footer.pb", bytes.substr(0, bytes.size() - 16));
  ExpectRejected({no_footer}, absl::StrCat("no_footer.pb: truncated snapshot (", bytes.size() - 16,
                                           " bytes: the footer the shim writes last is missing)"));
}

// One byte changed in the middle of a real snapshot: before the footer it
// could read as a valid but wrong snapshot (a changed size, address or
// count) or give a protobuf parse error; now it is named as corrupted.
TEST_F(DiffBadInputTest, CorruptedSnapshot) {
  const std::string bytes = ReadFile(Real());
  for (size_t at : {size_t{10}, bytes.size() / 2, bytes.size() - 17}) {
    std::string damaged = bytes;
    damaged[at] ^= 0x04;
    const std::string path = WriteFile(absl::StrCat(dir_.path(), "/flip", at, ".pb"), damaged);
    SCOPED_TRACE(path);
    ExpectRejected({path}, absl::StrCat("flip", at,
                                        ".pb: corrupted snapshot (CRC mismatch: the file was "
                                        "modified or damaged)"));
  }
}

// Before: a FIFO hung retain-diff (open() waits for a writer), /dev/zero was
// read until bad_alloc, and a 2-5 GiB file was read whole before it was
// refused. Now each is refused before reading.
TEST_F(DiffBadInputTest, FilesThatAreNotSnapshotsAreRefusedBeforeReading) {
  const std::string fifo = dir_.path() + "/pipe.pb";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectRejected({fifo}, absl::StrCat(fifo, ": is a FIFO (named pipe), not a regular file"));
  ExpectRejected({Real(), "/dev/zero"}, "/dev/zero: is a character device, not a regular file");
  ExpectRejected({dir_.path()}, absl::StrCat(dir_.path(), ": is a directory, not a snapshot"));
  // Sparse: 3 GiB on paper, nothing on disk.
  const std::string huge = dir_.path() + "/huge.pb";
  const int fd = open(huge.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{3} << 30), 0);
  close(fd);
  ExpectRejected({huge},
                 "huge.pb: 3221225472 bytes (3.0 GiB) is larger than the largest snapshot read "
                 "(1.0 GiB; --max-snapshot-size raises it)");
  ASSERT_GT(ReadFile(Real()).size(), 1024u);
  ExpectRejected({"--max-snapshot-size=1KiB", Real()},
                 absl::StrCat(Real(), ": ", ReadFile(Real()).size(), " bytes ("));
  ExpectRejected({"--max-snapshot-size=1KiB", Real()},
                 "is larger than the largest snapshot read (1.0 KiB; --max-snapshot-size raises "
                 "it)");
  ExpectRejected({"--max-snapshot-size=0", Real()}, "--max-snapshot-size: '0' is not between");
}

// "-" reads a snapshot from standard input (here a pipe), once.
TEST_F(DiffBadInputTest, StandardInput) {
  RunOptions options;
  options.argv = {RETAIN_DIFF_PATH, "--json", server_->Snapshot(0), "-"};
  options.stdin_data = ReadFile(Real());
  options.timeout_seconds = 60;
  const RunResult piped = ::retain::test::Run(options);
  ASSERT_EQ(piped.exit_code, 0) << Describe(piped);
  const Json json = ParseJson(piped.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_EQ(json.Str("mode"), "exact");
  EXPECT_EQ(json.Int("after.sequence"), LoadSnapshot(Real()).header().sequence());

  options.argv = {RETAIN_DIFF_PATH, "--max-snapshot-size=100", "-"};
  const RunResult big = ::retain::test::Run(options);
  EXPECT_EQ(big.exit_code, 2) << Describe(big);
  EXPECT_EQ(big.stderr_data,
            "retain-diff: stdin: more than the largest snapshot read (100 B; "
            "--max-snapshot-size raises it)\n");
  // Rules from standard input, the snapshot from a file.
  options.argv = {RETAIN_DIFF_PATH, "--json", "--by=category", "--rules=-", Real()};
  options.stdin_data = "category { name: \"leak\" frame: \"LeakyTrieInsert\" }\n";
  const RunResult rules = ::retain::test::Run(options);
  ASSERT_EQ(rules.exit_code, 0) << Describe(rules);
  const Json by_category = ParseJson(rules.stdout_data);
  ASSERT_TRUE(by_category.ok) << by_category.error;
  EXPECT_EQ(by_category.Str("rows.0.owner.key"), "leak");
  ExpectRejected({"-", "-"}, "standard input (-) can be read once");
  ExpectRejected({"--rules=-", "-"}, "standard input (-) can be read once");
}

// --rules takes several files, comma-separated: one list in the order
// given (the first category that matches wins, across files); a missing or
// bad one is named and nothing is printed.
TEST_F(DiffBadInputTest, SeveralRulesFilesAreOneListInOrder) {
  const std::string leak = WriteFile(dir_.path() + "/leak.textproto",
                                     "category { name: \"leak\" frame: \"LeakyTrieInsert\" }\n");
  const std::string any =
      WriteFile(dir_.path() + "/any.textproto", "category { name: \"anything\" frame: \".\" }\n");
  const RunResult first =
      RunDiff({"--json", "--by=category", "--top=0", "--rules=" + leak + "," + any, Real()});
  ASSERT_EQ(first.exit_code, 0) << Describe(first);
  const Json leak_first = ParseJson(first.stdout_data);
  ASSERT_TRUE(leak_first.ok) << leak_first.error;
  EXPECT_GE(leak_first.FindRow("rows", "owner.key", "leak"), 0) << first.stdout_data;
  EXPECT_GE(leak_first.FindRow("rows", "owner.key", "anything"), 0) << first.stdout_data;
  const RunResult second =
      RunDiff({"--json", "--by=category", "--top=0", "--rules=" + any + "," + leak, Real()});
  ASSERT_EQ(second.exit_code, 0) << Describe(second);
  const Json any_first = ParseJson(second.stdout_data);
  ASSERT_TRUE(any_first.ok) << any_first.error;
  EXPECT_EQ(any_first.FindRow("rows", "owner.key", "leak"), -1) << second.stdout_data;
  EXPECT_EQ(any_first.Size("rows"), 1u) << second.stdout_data;
  ExpectRejected({"--rules=" + leak + "," + dir_.path() + "/missing.textproto", Real()},
                 "missing.textproto");
}

// A snapshot cut where a top-level field ends is a well-formed but shorter
// message: cut before the allocations it reads as a process with nothing
// live. The design's failure rules still call it truncated input: every
// such cut must be refused, not reported as a smaller process.
TEST_F(DiffBadInputTest, TruncatedAtAFieldBoundary) {
  const std::string bytes = ReadFile(Real());
  const std::set<size_t> boundaries = FieldBoundaries(bytes);
  ASSERT_GE(boundaries.size(), 4u) << "header, memory, modules, ...";
  std::string accepted;
  for (size_t cut : boundaries) {
    if (cut == 0 || cut >= bytes.size()) continue;  // empty: tested above; whole: valid
    const std::string path =
        WriteFile(absl::StrCat(dir_.path(), "/cut", cut, ".pb"), bytes.substr(0, cut));
    const RunResult result = RunDiff({path});
    EXPECT_EQ(result.term_signal, 0) << Describe(result);
    if (result.exit_code != 2 || !absl::StartsWith(result.stderr_data, "retain-diff: ")) {
      absl::StrAppend(
          &accepted, "  cut at byte ", cut, " of ", bytes.size(), ": exit ", result.exit_code,
          ", stdout: ", result.stdout_data.substr(0, result.stdout_data.find('\n')), "\n");
    }
  }
  EXPECT_EQ(accepted, "") << "truncated snapshots read as complete ones:\n" << accepted;
}

TEST_F(DiffBadInputTest, RandomBytes) {
  std::mt19937 random(20240601);
  for (int i = 0; i < 8; ++i) {
    std::string bytes(256 << i, '\0');
    for (char& c : bytes) c = static_cast<char>(random() & 0xff);
    const std::string path = WriteFile(absl::StrCat(dir_.path(), "/random", i, ".pb"), bytes);
    SCOPED_TRACE(path);
    ExpectRejected({path}, absl::StrCat("random", i, ".pb: not a retain snapshot"));
  }
}

// A real snapshot re-serialized with the generated classes, claiming a
// format version this reader does not know, with a footer that checks out
// (as the newer shim that wrote it would have made).
TEST_F(DiffBadInputTest, NewerFormatVersion) {
  v1::Snapshot snapshot;
  ASSERT_TRUE(snapshot.ParseFromString(ReadFile(Real())));
  snapshot.mutable_header()->set_format_version(99);
  snapshot.clear_footer();
  std::string bytes;
  ASSERT_TRUE(snapshot.SerializeToString(&bytes));
  v1::Snapshot footer;
  footer.mutable_footer()->set_length(bytes.size());
  footer.mutable_footer()->set_crc32(tool::SnapshotCrc32(bytes));
  bytes += footer.SerializeAsString();
  ASSERT_EQ(footer.SerializeAsString().size(), 16u);
  const std::string path = WriteFile(dir_.path() + "/v99.pb", bytes);
  ExpectRejected({path}, "v99.pb: written by a newer retain (format 99");
  ExpectRejected({"--trend", server_->Snapshot(0), server_->Snapshot(1), path}, "format 99");
}

// A well-formed protobuf that is not a snapshot.
TEST_F(DiffBadInputTest, OtherProtobufMessage) {
  v1::Rules rules;
  v1::Category* category = rules.add_category();
  category->set_name("prompt-cache");
  category->add_frame("PromptCacheStore");
  category->set_bounded(true);
  std::string bytes;
  ASSERT_TRUE(rules.SerializeToString(&bytes));
  const std::string path = WriteFile(dir_.path() + "/rules.pb", bytes);
  ExpectRejected({path}, "rules.pb: not a retain snapshot");
}

// Two different programs: refused without --force, compared with it.
TEST_F(DiffBadInputTest, UnrelatedProgramsNeedForce) {
  ExpectRejected({unrelated_, Real()}, "two different programs (diff_unrelated and diff_server)");
  const RunResult forced = RunDiff({"--force", "--json", unrelated_, Real()});
  EXPECT_EQ(forced.exit_code, 0) << Describe(forced);
  EXPECT_EQ(forced.stderr_data, "") << Describe(forced);
  const Json json = ParseJson(forced.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_EQ(json.Str("mode"), "aggregate");
  // UnrelatedKeep's 100 KiB is gone, the server's sites are new.
  const int unrelated = json.FindRow("rows", "owner.key", "UnrelatedKeep");
  ASSERT_GE(unrelated, 0);
  EXPECT_EQ(json.Int(absl::StrCat("rows.", unrelated, ".released_bytes")), 100 * kKiB);
  EXPECT_EQ(json.Str("rows.0.owner.key"), kLeak);
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kIterations * 256 * kKiB);
}

TEST_F(DiffBadInputTest, TrendWithTwoFiles) {
  ExpectRejected({"--trend", server_->Snapshot(0), Real()}, "--trend needs 3");
}

TEST_F(DiffBadInputTest, SnapshotsInTheWrongOrder) {
  ExpectRejected({Real(), server_->Snapshot(0)}, "swap them");
}

TEST_F(DiffBadInputTest, UnknownFlag) {
  ExpectRejected({"--no-such-flag", Real()}, "unknown flag --no-such-flag");
  // Underscores are accepted as dashes; messages use the documented dashes.
  ExpectRejected({"--no_such_flag=3", Real()}, "unknown flag --no-such-flag");
}

TEST_F(DiffBadInputTest, BadGroupBy) {
  ExpectRejected({"--by", "owner", Real()}, "--by: 'owner' is not site");
  ExpectRejected({Real(), "--by"}, "--by needs a value");
}

TEST_F(DiffBadInputTest, BadFailOverSize) {
  ExpectRejected({"--fail-over", "12XB", server_->Snapshot(0), Real()}, "'12XB'");
  ExpectRejected({"--fail-over", "lots", server_->Snapshot(0), Real()}, "'lots' is not a size");
  ExpectRejected({"--fail-over", "1MiB/request", server_->Snapshot(0), Real()}, "needs --trend");
}

TEST_F(DiffBadInputTest, MissingFile) {
  const std::string missing = dir_.path() + "/missing.pb";
  ExpectRejected({missing}, missing);
  ExpectRejected({Real(), missing}, missing);
  ExpectRejected({"--rules", dir_.path() + "/missing.textproto", Real()}, "missing.textproto");
}

TEST_F(DiffBadInputTest, BadRulesFile) {
  const std::string rules =
      WriteFile(dir_.path() + "/bad.textproto", "category { name: \"x\" frame: \"([\" }\n");
  ExpectRejected({"--rules", rules, Real()}, "bad regex");
  const std::string garbled = WriteFile(dir_.path() + "/garbled.textproto", "category {\n");
  ExpectRejected({"--rules", garbled, Real()}, "garbled.textproto");
  // std::regex compiles recursively: 50,000 nested groups overflowed its
  // stack (a crash); such patterns are refused before they are compiled.
  const std::string nested = std::string(50000, '(') + "a" + std::string(50000, ')');
  ExpectRejected({"--skip", nested, Real()},
                 "--skip: a frame regex of 100001 characters (at most 1024)");
  const std::string deep = std::string(40, '(') + "a" + std::string(40, ')');
  ExpectRejected({"--skip", deep, Real()}, "': groups nested more than 32 deep");
  const std::string deep_rules = WriteFile(dir_.path() + "/deep.textproto",
                                           "category { name: \"x\" frame: \"" + nested + "\" }\n");
  ExpectRejected({"--rules", deep_rules, Real()},
                 "deep.textproto: category x: a frame regex of 100001 characters (at most 1024)");
  ExpectRejected({"--rules", "/dev/zero", Real()}, "/dev/zero: is a character device");
}

}  // namespace
}  // namespace retain::test
