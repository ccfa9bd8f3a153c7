// retain-exporter's engine (tools/lib/exporter.h) on snapshot files written
// here: file names, a half-written snapshot skipped then read once whole, a
// corrupt one retried a bounded number of times, a process that restarts
// under a new pid, a directory that disappears and comes back, the window,
// and the metrics' text (top owners plus "other", escaping).
#include "tools/lib/exporter.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "retain.pb.h"
#include "rules.pb.h"
#include "tools/lib/exporter_metrics.h"

namespace retain::tool {
namespace {

constexpr uint64_t kLeakBytes = 4096;       // per request
constexpr uint64_t kEntryBytes = 64 << 10;  // a cache entry
constexpr int kCacheEntries = 5;

// A process `pid` after `request` requests: the leak (frame 0xd0000) keeps
// kLeakBytes per request, the cache (0xc0000) up to kCacheEntries entries,
// and 1000 bytes elsewhere (0xe0000).
// `open`: requests still open (opened but not closed) at the snapshot.
std::string Make(uint32_t pid, int request, uint32_t sequence, int open = 0) {
  v1::Snapshot s;
  v1::Header* h = s.mutable_header();
  h->set_format_version(v1::FORMAT_VERSION_CURRENT);
  h->set_pid(pid);
  h->set_sequence(sequence);
  h->set_requests_opened(static_cast<uint64_t>(request + open));
  h->set_requests_closed(static_cast<uint64_t>(request));
  s.mutable_health();
  s.mutable_memory()->set_vm_rss(100000000 + static_cast<uint64_t>(request));
  for (uint32_t owner = 0; owner < 3; ++owner) {
    v1::Stack* stack = s.add_stacks();
    stack->set_id(owner + 1);
    stack->add_frames(0xc0000 + 0x10000 * owner);
  }
  v1::AllocationBlock* block = s.add_allocations();
  uint64_t address = 0x10000000, previous = 0;
  auto add = [&](uint32_t stack, uint64_t size) {
    block->add_address_delta(block->address_delta_size() == 0 ? address : address - previous);
    previous = address;
    address += size + 64;
    block->add_size(size);
    block->add_kind(v1::KIND_HEAP);
    block->add_stack_id(stack);
    block->add_birth_sequence(1);
    block->add_birth_time_us(1);
    block->add_thread_id(1);
  };
  for (int e = 0; e < std::min(request, kCacheEntries); ++e) add(1, kEntryBytes);
  for (int r = 0; r < request; ++r) add(2, kLeakBytes);
  add(3, 1000);
  s.add_totals()->set_kind(v1::KIND_HEAP);
  return s.SerializeAsString();
}

v1::Rules Rules() {
  v1::Rules rules;
  v1::Category* cache = rules.add_category();
  cache->set_name("cache");
  cache->add_frame("^0xc0");
  cache->set_bounded(true);
  v1::Category* leak = rules.add_category();
  leak->set_name("leak \"trie\"");  // a name that needs escaping in a label
  leak->add_frame("^0xd0");
  v1::Category* rest = rules.add_category();
  rest->set_name("rest");
  rest->add_frame("^0xe0");
  return rules;
}

class ExporterTest : public testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/retain_exporter_test_XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    root_ = templ;
    dir_ = root_ + "/srv";
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<Exporter> Create(size_t window = 30, absl::Duration stale = absl::Minutes(2)) {
    ExporterOptions options;
    options.dirs = {dir_};
    options.window = window;
    options.stale = stale;
    options.rules = Rules();
    options.owners.by = GroupBy::kCategory;
    absl::StatusOr<std::unique_ptr<Exporter>> exporter = Exporter::Create(std::move(options));
    EXPECT_TRUE(exporter.ok()) << exporter.status();
    return std::move(*exporter);
  }
  std::string PathOf(uint32_t pid, uint32_t sequence) {
    return dir_ + "/server." + std::to_string(pid) + "." + std::to_string(sequence) + ".pb";
  }
  void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  // Snapshots 1..n of `pid`, snapshot k after k-1 requests.
  void WriteSeries(uint32_t pid, int n, int first = 1) {
    for (int k = first; k <= n; ++k) {
      Write(PathOf(pid, static_cast<uint32_t>(k)), Make(pid, k - 1, static_cast<uint32_t>(k)));
    }
  }
  void SetMtime(const std::string& path, absl::Time when) {
    timespec times[2] = {absl::ToTimespec(when), absl::ToTimespec(when)};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  static const TrendRow* Row(const ProcessView& process, const std::string& display) {
    if (!process.trend) return nullptr;
    for (const TrendRow& row : process.trend->rows) {
      if (row.owner.display == display) return &row;
    }
    return nullptr;
  }

  std::string root_, dir_;
};

TEST(SnapshotNameTest, ParsesTheShimsNamesOnly) {
  std::optional<SnapshotName> name = ParseSnapshotName("llama-server.4242.17.pb");
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->exe, "llama-server");
  EXPECT_EQ(name->pid, 4242u);
  EXPECT_EQ(name->sequence, 17u);
  name = ParseSnapshotName("python3.11.7.2.pb");  // dots in the executable's name
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->exe, "python3.11");
  EXPECT_EQ(name->pid, 7u);
  for (const char* other :
       {".llama-server.4242.17.pb.tmp", ".x.1.2.pb", "x.1.2.pb.tmp", "x.1.pb", "x.a.2.pb",
        "x.1.b.pb", "x.0.2.pb", "x.1.0.pb", ".1.2.pb", "notes.txt", "x.1.2.pbx"}) {
    EXPECT_FALSE(ParseSnapshotName(other).has_value()) << other;
  }
}

TEST_F(ExporterTest, ReadsASeriesAndGivesVerdicts) {
  WriteSeries(100, 12);
  std::unique_ptr<Exporter> exporter = Create();
  exporter->Scan(absl::Now());
  EXPECT_EQ(exporter->Directories()[0].last_error, "");
  std::vector<ProcessView> processes = exporter->Processes();
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].pid, 100u);
  EXPECT_EQ(processes[0].exe, "server");
  EXPECT_EQ(processes[0].snapshots, 12u);
  const TrendRow* leak = Row(processes[0], "leak \"trie\"");
  ASSERT_NE(leak, nullptr);
  EXPECT_EQ(leak->fit.verdict, Verdict::kLinear);
  EXPECT_DOUBLE_EQ(leak->fit.slope, kLeakBytes);
  const TrendRow* cache = Row(processes[0], "cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->fit.verdict, Verdict::kPlateau);
  EXPECT_EQ(cache->live_bytes.back(), static_cast<int64_t>(kCacheEntries * kEntryBytes));
  // Read once: a second scan reads nothing new.
  exporter->Scan(absl::Now());
  EXPECT_EQ(exporter->Directories()[0].snapshots_read, 12u);
}

// The window keeps the newest snapshots, one per request count.
TEST_F(ExporterTest, TheWindowKeepsTheNewestRequestCounts) {
  std::unique_ptr<Exporter> exporter = Create(/*window=*/5);
  WriteSeries(100, 3);
  exporter->Scan(absl::Now());
  WriteSeries(100, 20, 4);
  exporter->Scan(absl::Now());
  // Three more snapshots at the last request count (an idle server): each
  // replaces the one before.
  for (uint32_t k = 21; k <= 23; ++k) Write(PathOf(100, k), Make(100, 19, k));
  exporter->Scan(absl::Now());
  std::vector<ProcessView> processes = exporter->Processes();
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].snapshots, 5u);
  ASSERT_TRUE(processes[0].trend.has_value());
  EXPECT_EQ(processes[0].trend->requests, (std::vector<double>{15, 16, 17, 18, 19}));
  EXPECT_EQ(processes[0].last->header().sequence(), 23u);
  const TrendRow* leak = Row(processes[0], "leak \"trie\"");
  ASSERT_NE(leak, nullptr);
  EXPECT_EQ(leak->fit.verdict, Verdict::kLinear);
  // The cache filled before the window: flat within it.
  EXPECT_EQ(Row(processes[0], "cache")->fit.verdict, Verdict::kFlat);
}

// At a count already in the window, a snapshot taken while no request was
// open stays rather than one taken during the next request (which holds
// part of it); the process lines show the newest.
TEST_F(ExporterTest, AtOneCountTheIdleSnapshotIsKept) {
  std::unique_ptr<Exporter> exporter = Create();
  WriteSeries(100, 6);                                 // idle, counts 0..5
  Write(PathOf(100, 7), Make(100, 5, 7, /*open=*/1));  // during request 6
  exporter->Scan(absl::Now());
  std::vector<ProcessView> processes = exporter->Processes();
  ASSERT_EQ(processes.size(), 1u);
  ASSERT_TRUE(processes[0].trend.has_value());
  EXPECT_EQ(processes[0].trend->snapshots.back()->header().sequence(), 6u);
  EXPECT_EQ(processes[0].last->header().sequence(), 7u);
  // A busy one at a count is replaced by a newer one, busy or not.
  Write(PathOf(100, 8), Make(100, 6, 8, /*open=*/1));
  Write(PathOf(100, 9), Make(100, 6, 9, /*open=*/1));
  exporter->Scan(absl::Now());
  EXPECT_EQ(exporter->Processes()[0].trend->snapshots.back()->header().sequence(), 9u);
  EXPECT_EQ(exporter->Processes()[0].snapshots, 7u);
}

// A snapshot cut short (a copy still in progress) is skipped and counted;
// once whole it is read, in order.
TEST_F(ExporterTest, AHalfWrittenSnapshotIsSkippedThenRead) {
  WriteSeries(100, 4);
  const std::string whole = Make(100, 4, 5);
  Write(PathOf(100, 5), whole.substr(0, whole.size() / 2));
  std::unique_ptr<Exporter> exporter = Create();
  exporter->Scan(absl::Now());
  ASSERT_EQ(exporter->Processes().size(), 1u);
  EXPECT_EQ(exporter->Processes()[0].snapshots, 4u);
  EXPECT_EQ(exporter->Directories()[0].read_errors, 1u);
  EXPECT_NE(exporter->Directories()[0].last_error.find("server.100.5.pb"), std::string::npos)
      << exporter->Directories()[0].last_error;
  Write(PathOf(100, 5), whole);
  exporter->Scan(absl::Now());
  EXPECT_EQ(exporter->Processes()[0].snapshots, 5u);
  EXPECT_EQ(exporter->Processes()[0].last->header().sequence(), 5u);
  EXPECT_EQ(exporter->Directories()[0].read_errors, 1u);
}

// A corrupt file that never changes is tried kReadAttempts times, then left
// alone; a newer snapshot is read past it.
TEST_F(ExporterTest, ACorruptSnapshotIsRetriedABoundedNumberOfTimes) {
  WriteSeries(100, 3);
  Write(PathOf(100, 4), "this is not a snapshot");
  std::unique_ptr<Exporter> exporter = Create();
  for (int scan = 0; scan < kReadAttempts + 3; ++scan) exporter->Scan(absl::Now());
  EXPECT_EQ(exporter->Directories()[0].read_errors, static_cast<uint64_t>(kReadAttempts));
  Write(PathOf(100, 5), Make(100, 4, 5));
  exporter->Scan(absl::Now());
  EXPECT_EQ(exporter->Processes()[0].last->header().sequence(), 5u);
  EXPECT_EQ(exporter->Processes()[0].snapshots, 4u);
}

// A server that restarts: the new pid is a new series at once; the old
// one's leftover snapshots are dropped once it has been quiet for `stale`.
TEST_F(ExporterTest, AProcessThatRestartsUnderANewPid) {
  const absl::Time now = absl::Now();
  WriteSeries(100, 5);
  for (uint32_t k = 1; k <= 5; ++k) SetMtime(PathOf(100, k), now - absl::Minutes(10));
  std::unique_ptr<Exporter> patient = Create(30, absl::Hours(1));
  std::unique_ptr<Exporter> quick = Create(30, absl::Minutes(1));
  patient->Scan(now);
  quick->Scan(now);
  ASSERT_EQ(quick->Processes().size(), 1u);  // alone, the old one stays however quiet

  WriteSeries(200, 4);  // the restarted server, written now
  patient->Scan(now);
  quick->Scan(now);
  std::vector<ProcessView> both = patient->Processes();
  ASSERT_EQ(both.size(), 2u);
  std::vector<ProcessView> restarted = quick->Processes();
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0].pid, 200u);
  EXPECT_EQ(restarted[0].snapshots, 4u);
  // Its series starts afresh: the sequence numbers restarted too.
  EXPECT_EQ(restarted[0].trend->requests, (std::vector<double>{0, 1, 2, 3}));
  // The old one's files deleted: gone from the patient exporter too.
  for (uint32_t k = 1; k <= 5; ++k) unlink(PathOf(100, k).c_str());
  patient->Scan(now);
  ASSERT_EQ(patient->Processes().size(), 1u);
  EXPECT_EQ(patient->Processes()[0].pid, 200u);
}

// A directory that disappears takes its processes with it and reads as
// down; when it comes back, its snapshots are read again.
TEST_F(ExporterTest, ADirectoryThatDisappears) {
  WriteSeries(100, 4);
  std::unique_ptr<Exporter> exporter = Create();
  exporter->Scan(absl::Now());
  ASSERT_EQ(exporter->Processes().size(), 1u);
  EXPECT_TRUE(exporter->Directories()[0].up);
  std::filesystem::remove_all(dir_);
  exporter->Scan(absl::Now());
  EXPECT_TRUE(exporter->Processes().empty());
  EXPECT_FALSE(exporter->Directories()[0].up);
  const std::string text = FormatMetrics(exporter->Processes(), exporter->Directories(), {});
  EXPECT_NE(text.find("retain_exporter_directory_up{dir=\"" + dir_ + "\"} 0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("retain_exporter_processes 0\n"), std::string::npos) << text;
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  WriteSeries(300, 3);
  exporter->Scan(absl::Now());
  ASSERT_EQ(exporter->Processes().size(), 1u);
  EXPECT_EQ(exporter->Processes()[0].pid, 300u);
  EXPECT_TRUE(exporter->Directories()[0].up);
}

// The text format: top owners (linear first) with their labels, the rest
// summed as "other", escaped label values, process and health lines.
TEST_F(ExporterTest, MetricsText) {
  WriteSeries(100, 12);
  std::unique_ptr<Exporter> exporter = Create();
  exporter->Scan(absl::Now());
  MetricsOptions options;
  options.top = 1;
  options.categories = true;
  const std::string text = FormatMetrics(exporter->Processes(), exporter->Directories(), options);
  const std::string base = "dir=\"" + dir_ + "\",exe=\"server\",pid=\"100\"";
  const std::string leak = "{" + base +
                           ",owner=\"leak \\\"trie\\\"\",domain=\"host\",verdict=\"linear\","
                           "category=\"leak \\\"trie\\\"\",bounded=\"false\"}";
  EXPECT_NE(text.find("retain_owner_bytes_per_request" + leak + " 4096\n"), std::string::npos)
      << text;
  // These snapshots have no residency: allocated bytes only, no resident line.
  EXPECT_NE(text.find("retain_owner_allocated_bytes" + leak + " 45056\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("retain_owner_resident_bytes{"), std::string::npos) << text;
  // The cache (5 x 64 KiB) and the rest (1000 B) as "other".
  const std::string other = "{" + base +
                            ",owner=\"other\",domain=\"\",verdict=\"none\",category=\"\","
                            "bounded=\"false\"}";
  EXPECT_NE(text.find("retain_owner_allocated_bytes" + other + " 328680\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("owner=\"cache\""), std::string::npos) << text;
  EXPECT_NE(text.find("retain_process_rss_bytes{" + base + "} 100000011\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("retain_process_requests_closed{" + base + "} 11\n"), std::string::npos);
  EXPECT_NE(text.find("retain_shim_degraded{" + base + "} 0\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE retain_owner_resident_bytes gauge\n"), std::string::npos);
  EXPECT_NE(text.find("retain_exporter_snapshots_read_total{dir=\"" + dir_ + "\"} 12\n"),
            std::string::npos);
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace retain::tool
