// libFuzzer target for the snapshot reader (tools/lib/snapshot_reader.h):
// the bytes are a snapshot file's contents, given to ParseSnapshot, the
// function ReadSnapshotFile hands every file to (after the bounded read).
//
// Beyond not crashing, hanging or allocating without bound (the CTest run
// sets -rss_limit_mb), the reader must keep its contract:
//  - a refusal is one line that starts with the name it was given;
//  - an accepted snapshot is valid for every consumer: columns line up
//    (FlattenAllocations reads each of them at every row), every stack id a
//    row names exists, and a footer, if there is one, is the file's own.
//
// Seeds: tests/fuzz/corpus-snapshot (real snapshots, README.md there).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "tools/lib/snapshot_reader.h"

namespace {

constexpr absl::string_view kName = "fuzz.pb";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<retain::v1::Snapshot> snapshot = retain::tool::ParseSnapshot(bytes, kName);
  if (!snapshot.ok()) {
    const absl::string_view message = snapshot.status().message();
    Check(absl::StartsWith(message, absl::StrCat(kName, ": ")), "message names the input");
    Check(!absl::StrContains(message, "\n"), "message is one line");
    return 0;
  }
  Check(snapshot->has_header() && snapshot->header().format_version() != 0, "has a header");
  Check(snapshot->has_health(), "has a health section");
  if (snapshot->has_footer()) {
    Check(snapshot->footer().length() + 16 == size, "the footer counts the file");
  }
  for (const retain::tool::Allocation& row : retain::tool::FlattenAllocations(*snapshot)) {
    Check(row.stack_id == 0 || retain::tool::FindStack(*snapshot, row.stack_id) != nullptr,
          "every stack id a row names exists");
  }
  // GPU backings join rows, never add any: counted rows are no more than
  // the rows, and every counted total stays a count.
  const size_t rows = retain::tool::FlattenAllocations(*snapshot).size();
  Check(retain::tool::CountedAllocations(*snapshot).size() <= rows, "merging never adds rows");
  retain::tool::CountedTotals(*snapshot);
  return 0;
}
