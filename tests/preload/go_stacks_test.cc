// Stacks that cross cgo, end to end: the go_cgo fixture (Go + cgo, built by
// the machine's go: tests/fixtures/go_cgo) runs under the shim with each
// RETAIN_UNWIND method, and retain-diff must name, for each way its Go code
// reaches C.malloc (directly, through a C function, on another goroutine,
// from a C -> Go callback, from a function the compiler inlined), the Go
// function that called C, at its line (--by site), with its callers in
// order, Go and C (--by site's callers and --by stack), and the exact bytes.
// The Go heap's own mappings (made by the runtime through x_cgo_mmap, on
// the thread's stack) must reach the runtime function that maps them, and
// through systemstack the Go function whose allocation grew the heap.
//
// Lines come from the fixture's sources, where markers name them
// ("// site:direct", "// call:direct").
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "acct_util.h"
#include "tests/e2e/diff_test_util.h"

namespace retain::test {
namespace {

using acct::FixtureOutput;
using acct::RunFixture;

// "// site:NAME" / "// call:NAME" markers of a source file -> line numbers.
std::map<std::string, int> Markers(const std::string& file) {
  std::map<std::string, int> lines;
  std::ifstream in(SourceRoot() + "/tests/fixtures/go_cgo/" + file);
  std::string line;
  const std::regex marker("// ((site|call):[a-z-]+)");
  for (int number = 1; std::getline(in, line); ++number) {
    std::smatch match;
    if (std::regex_search(line, match, marker)) lines[match[1]] = number;
  }
  EXPECT_FALSE(lines.empty()) << "no markers in " << file;
  return lines;
}

struct GoRun {
  std::unique_ptr<TempDir> dir = std::make_unique<TempDir>();
  RunResult run;
  std::string snapshot;  // the one labelled "kept"
};

GoRun RunGoFixture(const std::string& unwind) {
  GoRun go;
  go.run = RunFixture("go_cgo", {}, go.dir->path(), true, {{"RETAIN_UNWIND", unwind}});
  EXPECT_EQ(go.run.exit_code, 0) << acct::Describe(go.run);
  FixtureOutput out(go.run.stdout_data);
  EXPECT_EQ(out.Word("snapshot"), "0") << "retain_snapshot failed";
  for (const std::string& path : ListSnapshots(go.dir->path())) {
    if (LoadSnapshot(path).header().label() == "kept") go.snapshot = path;
  }
  EXPECT_FALSE(go.snapshot.empty()) << acct::Describe(go.run);
  return go;
}

// What each way of reaching C.malloc must give.
struct ExpectedSite {
  std::string name;                  // the fixture's "site NAME COUNT SIZE" line
  std::string site;                  // --by site's owner key
  std::vector<std::string> callers;  // its callers, outermost last (regexes)
  bool in_c = false;                 // the site is C code (below the cgo call)
};

class GoStacksTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    main_ = Markers("main.go");
    c_ = Markers("fixture.c");
  }

  std::string Go(const std::string& function, const std::string& marker) {
    return function + " (main.go:" + std::to_string(main_[marker]) + ")";
  }
  static std::string Quote(const std::string& text) {
    return std::regex_replace(text, std::regex(R"([.*()\[\]])"), R"(\$&)");
  }

  std::vector<ExpectedSite> Sites() {
    const std::string runtime_main = R"(runtime\.main \(proc\.go:\d+\))";
    const std::string goexit = R"(runtime\.goexit\.abi0 \(asm_amd64\.s:\d+\))";
    return {
        {"direct",
         Go("main.allocDirect", "site:direct"),
         {Quote(Go("main.main", "call:direct")), runtime_main, goexit}},
        // A C function that allocates is the site, as in a C program; the Go
        // function that called it comes right after, cgo's plumbing left out.
        {"through-c",
         "go_fixture_c_alloc (fixture.c:" + std::to_string(c_["site:c-alloc"]) + ")",
         {Quote(Go("main.allocThroughC", "site:through-c")),
          Quote(Go("main.main", "call:through-c")), runtime_main, goexit},
         true},
        // Go 1.19 runs `go f(x)` through a closure main.main.funcN.
        {"goroutine",
         Go("main.allocInGoroutine", "site:goroutine"),
         {Quote(Go("main.runWorker", "call:goroutine")),
          R"(main\.main\.\w+ \(main\.go:)" + std::to_string(main_["call:goroutine-start"]) +
              R"(\))",
          goexit}},
        {"callback",
         Go("main.allocInCallback", "site:callback"),
         {Quote(Go("main.goCallback", "call:callback-go")),
          Quote("go_fixture_call_back (fixture.c:" + std::to_string(c_["call:c-callback"]) + ")"),
          Quote(Go("main.allocThroughCallback", "call:callback-c")),
          Quote(Go("main.main", "call:callback")), runtime_main, goexit}},
        {"inlined",
         Go("main.allocInlined", "site:inlined"),
         {Quote(Go("main.main", "call:inlined")), runtime_main, goexit}},
    };
  }

  std::map<std::string, int> main_;
  std::map<std::string, int> c_;
};

TEST_P(GoStacksTest, TheOwnerIsTheGoFunctionThatCalledC) {
  GoRun go = RunGoFixture(GetParam());
  ASSERT_FALSE(go.snapshot.empty());
  FixtureOutput out(go.run.stdout_data);
  const RunResult diff = RunDiff({go.snapshot, "--json", "--by", "site", "--measure", "allocated",
                                  "--top", "0", "--depth", "16"});
  ASSERT_EQ(diff.exit_code, 0) << diff.stderr_data;
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  for (const ExpectedSite& expected : Sites()) {
    SCOPED_TRACE(expected.name);
    const std::vector<std::string> line = out.Named("site", expected.name);
    ASSERT_EQ(line.size(), 2u);
    const int64_t count = std::stoll(line[0]);
    const int64_t size = std::stoll(line[1]);
    const int row = json.FindRow("rows", "owner.key", expected.site);
    ASSERT_GE(row, 0) << "no owner " << expected.site << "\n" << diff.stdout_data;
    const std::string at = "rows." + std::to_string(row);
    EXPECT_EQ(json.Int(at + ".retained_bytes"), count * size);
    EXPECT_EQ(json.Int(at + ".retained_count"), count);
    ASSERT_EQ(json.Size(at + ".owner.chain"), expected.callers.size()) << diff.stdout_data;
    for (size_t i = 0; i < expected.callers.size(); ++i) {
      const std::string caller = json.Str(at + ".owner.chain." + std::to_string(i));
      EXPECT_TRUE(std::regex_match(caller, std::regex(expected.callers[i])))
          << "caller " << i << ": " << caller << " is not " << expected.callers[i];
    }
  }
  // The table says the same.
  const RunResult table =
      RunDiff({go.snapshot, "--by", "site", "--measure", "allocated", "--top", "0"});
  EXPECT_NE(table.stdout_data.find(Go("main.allocDirect", "site:direct") + "\n"), std::string::npos)
      << table.stdout_data;
}

// --by stack: the whole stack, through cgo's plumbing, leaf first.
TEST_P(GoStacksTest, TheWholeStackCrossesCgo) {
  GoRun go = RunGoFixture(GetParam());
  ASSERT_FALSE(go.snapshot.empty());
  FixtureOutput out(go.run.stdout_data);
  const RunResult diff =
      RunDiff({go.snapshot, "--json", "--by", "stack", "--measure", "allocated", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << diff.stderr_data;
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  for (const ExpectedSite& expected : Sites()) {
    SCOPED_TRACE(expected.name);
    const int64_t bytes = std::stoll(out.Named("site", expected.name).at(0)) *
                          std::stoll(out.Named("site", expected.name).at(1));
    // The one stack holding the site.
    int found = -1;
    for (size_t row = 0; row < json.Size("rows"); ++row) {
      const std::string frames = "rows." + std::to_string(row) + ".owner.frames";
      for (size_t i = 0; i < json.Size(frames); ++i) {
        if (json.Str(frames + "." + std::to_string(i)) == expected.site) {
          EXPECT_EQ(found, -1) << "two stacks hold " << expected.site;
          found = static_cast<int>(row);
        }
      }
    }
    ASSERT_GE(found, 0) << diff.stdout_data;
    const std::string at = "rows." + std::to_string(found);
    EXPECT_EQ(json.Int(at + ".retained_bytes"), bytes);
    std::vector<std::string> frames;
    for (size_t i = 0; i < json.Size(at + ".owner.frames"); ++i) {
      frames.push_back(json.Str(at + ".owner.frames." + std::to_string(i)));
    }
    std::ostringstream all;
    for (const std::string& frame : frames) all << "\n  " << frame;
    // In order: C's plumbing and the runtime's way into C, the site, then
    // each caller; the stack ends at the goroutine's first frame.
    const std::string cgo_call = R"(runtime\.asmcgocall\.abi0 \(asm_amd64\.s:\d+\))";
    const std::string cgocall = R"(runtime\.cgocall \(cgocall\.go:\d+\))";
    std::vector<std::string> want = {cgo_call, cgocall, Quote(expected.site)};
    if (expected.in_c) want = {Quote(expected.site), cgo_call, cgocall};
    want.insert(want.end(), expected.callers.begin(), expected.callers.end());
    size_t next = 0;
    for (const std::string& frame : frames) {
      if (next < want.size() && std::regex_match(frame, std::regex(want[next]))) ++next;
    }
    EXPECT_EQ(next, want.size()) << "missing, in order: " << (next < want.size() ? want[next] : "")
                                 << all.str();
    EXPECT_TRUE(std::regex_match(frames.back(), std::regex(expected.callers.back()))) << all.str();
    if (expected.name == "callback") {
      // Go -> C again on the way out: cgocallback and crosscall2 between
      // the exported Go function and the C function that called it, then
      // the cgo call that reached C.
      const std::vector<std::string> crossing = {R"(main\.goCallback .*)",
                                                 R"(runtime\.cgocallback\.abi0 .*)",
                                                 R"(crosscall2 .*)",
                                                 R"(go_fixture_call_back .*)",
                                                 cgo_call,
                                                 R"(main\.allocThroughCallback .*)"};
      size_t at_crossing = 0;
      for (const std::string& frame : frames) {
        if (at_crossing < crossing.size() &&
            std::regex_match(frame, std::regex(crossing[at_crossing]))) {
          ++at_crossing;
        }
      }
      EXPECT_EQ(at_crossing, crossing.size()) << all.str();
    }
  }
}

// The Go heap's own mappings: x_cgo_mmap, called by the runtime on the
// thread's stack, reaches the runtime function that maps the memory, and
// past systemstack the Go code whose allocation made the heap grow.
TEST_P(GoStacksTest, GoHeapMappingsReachTheRuntimeAndTheAllocatingFunction) {
  GoRun go = RunGoFixture(GetParam());
  ASSERT_FALSE(go.snapshot.empty());
  const RunResult diff =
      RunDiff({go.snapshot, "--json", "--by", "stack", "--measure", "allocated", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << diff.stderr_data;
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  int go_heap_rows = 0;
  bool reserved_by_sys_alloc = false;
  bool grown_by_the_fixture = false;
  const std::string grower = Go("main.growGoHeap", "site:go-heap");
  for (size_t row = 0; row < json.Size("rows"); ++row) {
    const std::string at = "rows." + std::to_string(row) + ".owner.frames";
    std::vector<std::string> frames;
    for (size_t i = 0; i < json.Size(at); ++i) {
      frames.push_back(json.Str(at + "." + std::to_string(i)));
    }
    if (frames.empty() || frames[0].rfind("x_cgo_mmap (", 0) != 0) continue;
    ++go_heap_rows;
    std::ostringstream all;
    for (const std::string& frame : frames) all << "\n  " << frame;
    // Past the mmap plumbing (x_cgo_mmap, callCgoMmap, runtime.mmap) to
    // the runtime's memory functions.
    bool reaches = false;
    for (const std::string& frame : frames) {
      if (std::regex_match(frame, std::regex(R"(runtime\.sys(Alloc|Reserve|Map)(OS)? \(.*)"))) {
        reaches = true;
      }
      if (frame.rfind("runtime.(*mheap).sysAlloc (", 0) == 0) reserved_by_sys_alloc = true;
    }
    EXPECT_TRUE(reaches) << all.str();
    // The 80 MiB slice: the heap grew for it, through systemstack.
    const std::vector<std::string> path = {"runtime.(*mheap).grow (", "runtime.systemstack.abi0 (",
                                           "runtime.mallocgc (", grower,
                                           Go("main.main", "call:go-heap")};
    size_t next = 0;
    for (const std::string& frame : frames) {
      if (next < path.size() && frame.rfind(path[next], 0) == 0) ++next;
    }
    if (next == path.size()) grown_by_the_fixture = true;
  }
  EXPECT_GT(go_heap_rows, 0) << diff.stdout_data;
  EXPECT_TRUE(reserved_by_sys_alloc) << diff.stdout_data;
  EXPECT_TRUE(grown_by_the_fixture) << diff.stdout_data;
}

// Every stack was walked: none failed.
TEST_P(GoStacksTest, NoUnwindFailures) {
  GoRun go = RunGoFixture(GetParam());
  ASSERT_FALSE(go.snapshot.empty());
  const v1::Snapshot snapshot = LoadSnapshot(go.snapshot);
  EXPECT_EQ(snapshot.health().unwind_failures(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Unwinders, GoStacksTest, ::testing::Values("cfi", "libunwind", "fp"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace retain::test
