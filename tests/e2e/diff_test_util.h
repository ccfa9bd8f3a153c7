// diff_test_util: what the retain-diff end-to-end tests share: running the
// diff_server fixture under the shim and finding its snapshots by label,
// running retain-diff itself, parsing its JSON with an independent parser
// (python3's json module) and its table and folded outputs.
//
// Functions report problems through gtest (ADD_FAILURE) and return empty
// results; none aborts. Not thread-safe (tests run one at a time).
#ifndef RETAIN_TESTS_E2E_DIFF_TEST_UTIL_H_
#define RETAIN_TESTS_E2E_DIFF_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace retain::test {

// The three owners diff_server creates, by function.
inline constexpr char kLeak[] = "LeakyTrieInsert";
inline constexpr char kCache[] = "PromptCacheStore";
inline constexpr char kWarmUp[] = "LoadVocabularyOnce";
inline constexpr int kIterations = 12;
inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kCacheBytes = 4 * 64 * kKiB;  // 4 entries of 64 KiB
inline constexpr int64_t kWarmUpBytes = 1024 * kKiB;

// One run of a diff_server build under libretain.so, in its own directory.
struct ServerRun {
  std::unique_ptr<TempDir> dir;
  RunResult run;
  // "iter-00".."iter-12" -> snapshot path.
  std::map<std::string, std::string> by_label;
  // Function -> source line of its malloc call ("site F L" lines).
  std::map<std::string, int> site_lines;
  uint64_t site_offset = 0;  // LeakyTrieInsert - __executable_start
  int leak_kb = 0;

  // Path of snapshot "iter-NN" (empty, and a test failure, if missing).
  std::string Snapshot(int iteration) const;
  // "iter-00".."iter-12" in order.
  std::vector<std::string> Series() const;
  // "LeakyTrieInsert (diff_server.c:93)": the site key --by site shows.
  std::string Site(const std::string& function) const;
  // Everything about the run, for assertion messages.
  std::string Describe() const;
};

// Runs tests/fixtures/<fixture> (e.g. "diff_server", "diff_build_a/diff_server")
// under the shim and collects what it left; check RunComplete() before use.
ServerRun RunServer(const std::string& fixture);
// True when the run exited 0 and left every snapshot and site line.
bool RunComplete(const ServerRun& run);

// retain-diff with `args`.
RunResult RunDiff(const std::vector<std::string>& args);
// A run's details, for assertion messages.
std::string Describe(const RunResult& result);

// A JSON document flattened by python3's json module: path -> value, with
// path components joined by '.', array elements by index ("rows.0.owner.key").
// Every node is present, containers included.
struct Json {
  struct Node {
    std::string type;  // object, array, str, int, float, bool, null
    std::string text;  // json.dumps of the value (containers: "" / size)
    size_t size = 0;   // containers: number of members
  };
  bool ok = false;
  std::string error;
  std::map<std::string, Node> nodes;

  bool Has(const std::string& path) const { return nodes.count(path) != 0; }
  std::string Type(const std::string& path) const;
  // A string's value (without quotes); "" when absent or not a string.
  std::string Str(const std::string& path) const;
  // An integer's value; a float is accepted only when it is integral and
  // printed as such (never a rounded 6-digit form). Fails the test otherwise.
  int64_t Int(const std::string& path) const;
  double Number(const std::string& path) const;
  // A number (integer or float) that must be integral, e.g. a "number"
  // field holding bytes; fails the test with the printed text otherwise.
  int64_t Integral(const std::string& path) const;
  bool Bool(const std::string& path) const;
  size_t Size(const std::string& path) const;
  // The index of the row of `list` (e.g. "rows") whose `field` (e.g.
  // "owner.key") equals `value`, or -1.
  int FindRow(const std::string& list, const std::string& field, const std::string& value) const;
};

// Parses `text` with python3 (strict: no NaN/Infinity, no trailing data).
Json ParseJson(const std::string& text);

// One owner row of the diff table.
struct TableRow {
  std::string retained;   // "3.0 MiB", in the measure used (the first column)
  std::string allocated;  // the allocated column beside a resident one, else = retained
  int64_t count = 0;
  std::string share;               // "70.6%"
  std::string released;            // "0 B"
  std::string owner;               // display and [category]
  std::vector<std::string> chain;  // "<- caller" lines, without "<- "
};
struct Table {
  std::string mode_line;  // "exact: same process ..." (after "mode")
  std::vector<TableRow> rows;
  std::string total_line;
  std::string total_retained;   // the total's first column
  std::string total_allocated;  // its allocated column, else = total_retained
  std::string more_line;        // "... N more owners (--top)" or ""
};
// Parses a two-snapshot table (with a released column, and an allocated
// column when the measure is resident).
Table ParseDiffTable(const std::string& text);

// One line of the --folded output.
struct FoldedLine {
  std::vector<std::string> frames;  // root first
  int64_t bytes = 0;
};
// Parses --folded; fails the test on a line that is not "frames bytes".
std::vector<FoldedLine> ParseFolded(const std::string& text);

// The lines of `text` (without the newlines).
std::vector<std::string> Lines(const std::string& text);

}  // namespace retain::test

#endif  // RETAIN_TESTS_E2E_DIFF_TEST_UTIL_H_
