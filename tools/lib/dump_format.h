// dump_format: renders one snapshot as the human-readable summary and the
// JSON object that retain-dump prints, plus the small formatting helpers the
// other tools share (JSON strings, module+offset frames; byte units are
// byte_size.h).
//
// Thread-compatible: pure functions over a validated snapshot (one that
// ReadSnapshotFile or ParseSnapshot accepted).
#ifndef RETAIN_TOOLS_LIB_DUMP_FORMAT_H_
#define RETAIN_TOOLS_LIB_DUMP_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "retain.pb.h"
#include "tools/lib/byte_size.h"  // HumanBytes, for the callers

namespace retain::tool {

struct DumpOptions {
  // Where the snapshot came from; printed as is.
  std::string source;
  // How many stacks to list, largest live bytes first. 0 lists none.
  int top = 10;
};

// Live bytes and count of the allocations that share one stack.
struct StackUsage {
  uint32_t stack_id = 0;  // 0: allocations recorded without a stack
  uint64_t live_bytes = 0;
  uint64_t live_count = 0;
};

// Groups the snapshot's live allocations by stack and returns the `n`
// largest by live bytes (ties: more allocations first, then lower id).
std::vector<StackUsage> TopStacks(const v1::Snapshot& snapshot, size_t n);

// Maps return addresses to the module whose executable segment holds them.
// Built once per snapshot; a lookup scans the segments (a process has a few
// hundred), preferring a loaded module over an unloaded one at the same
// place, since a dlclose()d library's range can be reused by a later dlopen.
class ModuleIndex {
 public:
  explicit ModuleIndex(const v1::Snapshot& snapshot);

  // The module holding `address`, or nullptr when no executable segment does.
  const v1::Module* Find(uint64_t address) const;

  // "libfoo.so+0x1234" (basename of the module path, address - load_bias),
  // or "0x7f0123456789" when no module holds the address.
  std::string FormatFrame(uint64_t address) const;

 private:
  struct Range {
    uint64_t start;
    uint64_t end;
    const v1::Module* module;
  };
  std::vector<Range> ranges_;
};

// `text` as a quoted JSON string: quotes, backslashes and control characters
// escaped; bytes that are not valid UTF-8 become U+FFFD so the output always
// parses.
std::string JsonString(absl::string_view text);

// Lower-case names of enum values as the tools print them ("api", "exit",
// "frame-pointer", ...; "unspecified" for 0, "trigger-N" / "unwind-N" for
// values this build does not know).
std::string TriggerName(v1::Trigger trigger);
std::string UnwindMethodName(v1::UnwindMethod method);

// The summary retain-dump prints: header, process memory, totals per kind,
// shim health, top stacks. Ends with a newline.
std::string FormatDumpText(const v1::Snapshot& snapshot, const DumpOptions& options);

// The same numbers as one JSON object (exact byte counts, addresses as hex
// strings). Ends with a newline.
std::string FormatDumpJson(const v1::Snapshot& snapshot, const DumpOptions& options);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DUMP_FORMAT_H_
