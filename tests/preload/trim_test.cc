// POST /trim on the control endpoint (snapshot/trim.h): the fixture
// trim_fragment leaves about 115 MiB of freed heap that glibc keeps (the
// survivors are scattered, none at the top); /trim runs malloc_trim(0) in
// the process and answers RSS before and after. The test checks the drop
// against /proc/PID/status read from outside, and that the next snapshot
// records the trim (ProcessMemory.trims, trim_returned_bytes,
// last_trim_unix_ns).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

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

TEST(TrimTest, TrimIsPostOnly) {
  TempDir sockets;
  const std::string socket = sockets.path() + "/ctl.sock";
  ControlProcess process("unix:" + socket);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  EXPECT_EQ(Exchange(ConnectUnix(socket), Simple("GET", "/trim")).status, 405);
}

}  // namespace
}  // namespace retain::test
