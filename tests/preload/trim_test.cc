// POST /trim on the control endpoint (snapshot/trim.h): the fixture
// trim_fragment leaves about 115 MiB of freed heap that glibc keeps (the
// survivors are scattered, none at the top); /trim runs malloc_trim(0) in
// the process and answers RSS before and after. The test checks the drop
// against /proc/PID/status read from outside, and that the next snapshot
// records the trim (ProcessMemory.trims, trim_returned_bytes,
// last_trim_unix_ns).
//
// Then what retain-diff makes of it (tools/lib/allocator_report.h), on real
// memory: before the trim its header shows the free memory malloc holds,
// arena by arena, and the one advice the numbers support (malloc_trim: the
// free pages lie between live blocks); after it, that a trim ran between the
// two snapshots and returned them. arena_spread spreads free memory over 8
// thread arenas: MALLOC_ARENA_MAX. A quiet program gets no advice at all.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "tests/preload/control_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {
namespace {

using control::ConnectUnix;
using control::ControlOptions;
using control::ControlProcess;
using control::Exchange;
using control::Response;
using control::Simple;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// "Key:  N kB" of /proc/PID/status, in bytes (0 when absent).
uint64_t StatusBytes(int pid, const std::string& key) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

// The unsigned number of "key" in a flat JSON object, or -1.
int64_t JsonNumber(const std::string& body, const std::string& key) {
  const std::string quoted = "\"" + key + "\":";
  const size_t at = body.find(quoted);
  if (at == std::string::npos) return -1;
  return std::stoll(body.substr(at + quoted.size()));
}

TEST(TrimTest, PostTrimReturnsTheFreeMemoryGlibcKeptAndTheSnapshotSaysSo) {
  TempDir sockets;
  const std::string socket = sockets.path() + "/ctl.sock";
  ControlOptions options;
  options.fixture = "trim_fragment";
  ControlProcess process("unix:" + socket, options);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  const int pid = process.FixturePid();
  ASSERT_GT(pid, 0);

  const uint64_t anon_before = StatusBytes(pid, "RssAnon");
  EXPECT_GE(anon_before, 100 * kMiB) << "the freed blocks are still resident";
  Response r = Exchange(ConnectUnix(socket), Simple("POST", "/trim"));
  ASSERT_EQ(r.status, 200) << r.head << r.body;
  const uint64_t anon_after = StatusBytes(pid, "RssAnon");
  EXPECT_NE(r.head.find("application/json"), std::string::npos) << r.head;

  const int64_t before = JsonNumber(r.body, "rss_anon_before");
  const int64_t after = JsonNumber(r.body, "rss_anon_after");
  const int64_t returned = JsonNumber(r.body, "returned_bytes");
  ASSERT_GE(before, 0) << r.body;
  ASSERT_GE(after, 0) << r.body;
  EXPECT_EQ(JsonNumber(r.body, "pid"), pid);
  EXPECT_EQ(returned, before - after) << r.body;
  EXPECT_GE(returned, static_cast<int64_t>(64 * kMiB)) << r.body;
  EXPECT_NE(r.body.find("\"released\":true"), std::string::npos) << r.body;
  EXPECT_GE(JsonNumber(r.body, "vm_rss_before") - JsonNumber(r.body, "vm_rss_after"),
            static_cast<int64_t>(64 * kMiB))
      << r.body;
  // The process is idle: what it saw is what the test sees from outside,
  // within the shim's own pages (the control thread's buffers).
  EXPECT_NEAR(static_cast<double>(before), static_cast<double>(anon_before), 2.0 * kMiB);
  EXPECT_NEAR(static_cast<double>(after), static_cast<double>(anon_after), 2.0 * kMiB);
  EXPECT_GE(anon_before - anon_after, 64 * kMiB);
  RecordProperty("rss_anon_returned_bytes", std::to_string(returned));
  std::printf("trim: RssAnon %llu -> %llu (returned %lld bytes)\n",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(after),
              static_cast<long long>(returned));

  Response snap = Exchange(ConnectUnix(socket), Simple("POST", "/snapshot?label=after-trim"));
  ASSERT_EQ(snap.status, 200) << snap.head << snap.body;
  auto snapshot = tool::ReadSnapshotFile(snap.body.substr(0, snap.body.find('\n')));
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->memory().trims(), 1u);
  EXPECT_EQ(snapshot->memory().trim_returned_bytes(), static_cast<uint64_t>(returned));
  EXPECT_GT(snapshot->memory().last_trim_unix_ns(), 0u);
  EXPECT_LE(snapshot->memory().last_trim_unix_ns(), snapshot->header().time_unix_ns());
}

// retain-diff's output for `argv` (after the tool's path).
std::string RetainDiff(const std::vector<std::string>& args) {
  RunOptions options;
  options.argv = {RETAIN_DIFF_PATH};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.timeout_seconds = 60;
  const RunResult r = Run(options);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  return r.stdout_data;
}

// What a python3 `script` prints from the JSON on its stdin (as `j`).
std::string FromJson(const std::string& json, const std::string& script) {
  RunOptions options;
  options.argv = {"python3", "-c", "import json, sys\nj = json.load(sys.stdin)\n" + script};
  options.stdin_data = json;
  options.timeout_seconds = 60;
  const RunResult r = Run(options);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  return r.stdout_data;
}

// The knobs retain-diff --json advises, one per line.
std::string AdvisedKnobs(const std::string& json) {
  return FromJson(json, "for a in j['allocator']['advice']: print(a['knob'])");
}

std::string SnapshotPath(const std::string& socket, const std::string& label) {
  Response r = Exchange(ConnectUnix(socket), Simple("POST", "/snapshot?label=" + label));
  EXPECT_EQ(r.status, 200) << r.head << r.body;
  return r.body.substr(0, r.body.find('\n'));
}

// The header of retain-diff's table (everything before the first empty line).
std::string Header(const std::string& text) { return text.substr(0, text.find("\n\n")); }

TEST(TrimTest, RetainDiffSaysMallocKeepsItAndThenThatATrimReturnedIt) {
  TempDir sockets;
  const std::string socket = sockets.path() + "/ctl.sock";
  ControlOptions options;
  options.fixture = "trim_fragment";
  ControlProcess process("unix:" + socket, options);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  const int pid = process.FixturePid();
  ASSERT_GT(pid, 0);

  const std::string before = SnapshotPath(socket, "before");
  const std::string text = RetainDiff({before});
  const std::string json = RetainDiff({"--json", before});
  std::printf("%s\n", Header(text).c_str());
  // One arena: the program's. The shim's threads (which wrote the snapshot)
  // never took one, malloc_info's stream included.
  EXPECT_EQ(FromJson(json, "print(j['allocator']['arena_count'])"), "1\n");
  const uint64_t free_held = std::stoull(FromJson(json, "print(j['allocator']['free_held'])"));
  const uint64_t arena_free = std::stoull(FromJson(json, "print(j['allocator']['arena_free'])"));
  const uint64_t trimmable =
      std::stoull(FromJson(json, "print(j['allocator']['trimmable_bytes'])"));
  EXPECT_GE(free_held, 100 * kMiB);
  EXPECT_NEAR(static_cast<double>(arena_free), static_cast<double>(free_held), 64.0 * 1024);
  EXPECT_GE(trimmable, 90 * kMiB) << "the holes between survivors are whole pages";
  RecordProperty("free_held_bytes", std::to_string(free_held));
  EXPECT_NE(text.find("\n  arenas      "), std::string::npos) << text;
  EXPECT_NE(text.find(" free held by malloc in 1 arena (main "), std::string::npos) << text;
  // The free memory is between live blocks, not at the top, in one arena,
  // around small blocks: no threshold would have returned it; a trim will.
  EXPECT_EQ(AdvisedKnobs(json), "malloc_trim\n");
  EXPECT_NE(text.find("\n  advice      malloc_trim(0): at least "), std::string::npos) << text;
  EXPECT_EQ(text.find("MALLOC_ARENA_MAX"), std::string::npos) << text;
  EXPECT_EQ(text.find("M_TRIM_THRESHOLD"), std::string::npos) << text;
  EXPECT_EQ(text.find("M_MMAP_THRESHOLD"), std::string::npos) << text;
  EXPECT_EQ(text.find("\n  trim "), std::string::npos) << "no trim yet\n" << text;

  const uint64_t anon_before = StatusBytes(pid, "RssAnon");
  Response r = Exchange(ConnectUnix(socket), Simple("POST", "/trim"));
  ASSERT_EQ(r.status, 200) << r.head << r.body;
  const uint64_t anon_after = StatusBytes(pid, "RssAnon");
  EXPECT_GE(anon_before - anon_after, 90 * kMiB);
  RecordProperty("rss_anon_drop_bytes", std::to_string(anon_before - anon_after));
  std::printf("trim: RssAnon %llu -> %llu from outside\n",
              static_cast<unsigned long long>(anon_before),
              static_cast<unsigned long long>(anon_after));

  const std::string after = SnapshotPath(socket, "after");
  const std::string diff_text = RetainDiff({before, after});
  const std::string diff_json = RetainDiff({"--json", before, after});
  std::printf("%s\n", Header(diff_text).c_str());
  EXPECT_NE(diff_text.find("\n  trim        a trim ran between the two snapshots and returned "),
            std::string::npos)
      << diff_text;
  EXPECT_NE(diff_text.find("part of the drop is malloc returning free memory, not frees"),
            std::string::npos);
  EXPECT_EQ(FromJson(diff_json, "print(j['allocator']['trims_between'])"), "1\n");
  EXPECT_GE(std::stoull(FromJson(diff_json, "print(j['allocator']['trim_returned_between'])")),
            90 * kMiB);
  // malloc still counts the chunks it emptied: the level adds up anyway, and
  // nothing is advised for memory that is already back.
  EXPECT_EQ(FromJson(diff_json, "print(j['rss']['adds_up'])"), "True\n") << diff_text;
  EXPECT_GE(
      std::stoull(FromJson(diff_json, "print(j['rss']['after_level']['allocator_free_trimmed'])")),
      90 * kMiB);
  EXPECT_EQ(diff_text.find("warning"), std::string::npos) << diff_text;
  EXPECT_EQ(AdvisedKnobs(diff_json), "");
}

TEST(TrimTest, FreeMemorySpreadOverThreadArenasGetsArenaMaxAdvice) {
  TempDir sockets;
  const std::string socket = sockets.path() + "/ctl.sock";
  ControlOptions options;
  options.fixture = "arena_spread";
  ControlProcess process("unix:" + socket, options);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  const std::string snapshot = SnapshotPath(socket, "spread");
  const std::string text = RetainDiff({snapshot});
  const std::string json = RetainDiff({"--json", snapshot});
  std::printf("%s\n", Header(text).c_str());
  // The main arena and the 8 threads' (glibc allows 8 per core; one core
  // would still give more than 2).
  const int arenas = std::stoi(FromJson(json, "print(j['allocator']['arena_count'])"));
  EXPECT_GT(arenas, 2);
  // Each thread arena holds most of its 16 MiB free.
  std::istringstream holding(FromJson(
      json, "for a in j['allocator']['arenas']:\n  if a['number'] != 0: print(a['free_bytes'])"));
  int thread_arenas = 0;
  for (uint64_t bytes = 0; holding >> bytes; ++thread_arenas) {
    EXPECT_GE(bytes, 8 * kMiB) << "thread arena " << thread_arenas;
  }
  EXPECT_EQ(thread_arenas, arenas - 1);
  RecordProperty("arenas", std::to_string(arenas));
  const std::string knobs = AdvisedKnobs(json);
  EXPECT_NE(knobs.find("MALLOC_ARENA_MAX\n"), std::string::npos) << knobs;
  EXPECT_EQ(knobs.find("M_TRIM_THRESHOLD"), std::string::npos) << knobs;
  EXPECT_EQ(knobs.find("M_MMAP_THRESHOLD"), std::string::npos) << knobs;
  EXPECT_NE(text.find("\n  advice      MALLOC_ARENA_MAX=2: "), std::string::npos) << text;
}

// "Never otherwise": a program at rest, with a few blocks and the shim's
// control thread, gets the arenas line and no advice.
TEST(TrimTest, AQuietProgramGetsNoAdvice) {
  TempDir sockets;
  const std::string socket = sockets.path() + "/ctl.sock";
  ControlProcess process("unix:" + socket);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  const std::string snapshot = SnapshotPath(socket, "quiet");
  const std::string text = RetainDiff({snapshot});
  const std::string json = RetainDiff({"--json", snapshot});
  EXPECT_NE(text.find("\n  arenas      "), std::string::npos) << text;
  EXPECT_EQ(text.find("advice"), std::string::npos) << text;
  EXPECT_EQ(AdvisedKnobs(json), "");
  EXPECT_EQ(FromJson(json, "print(j['allocator']['arena_count'])"), "1\n");
}

TEST(TrimTest, TrimIsPostOnly) {
  TempDir sockets;
  const std::string socket = sockets.path() + "/ctl.sock";
  ControlProcess process("unix:" + socket);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  EXPECT_EQ(Exchange(ConnectUnix(socket), Simple("GET", "/trim")).status, 405);
}

}  // namespace
}  // namespace retain::test
