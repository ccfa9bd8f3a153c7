// cli: what every retain command-line tool shares: flag checking that keeps
// the promise "exit 2 on a usage error" (absl exits 1 on a bad flag), --help
// detection and the flags' part of it, and human byte sizes on the command
// line.
#ifndef RETAIN_TOOLS_LIB_CLI_H_
#define RETAIN_TOOLS_LIB_CLI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace retain::tool {

// True if argv asks for help (-h, --help, -help) before any "--".
bool WantsHelp(int argc, char** argv);

// The flags defined (ABSL_FLAG) in source file `defined_in` (pass __FILE__),
// one per line, by name: "  --name=DEFAULT  help" with the name as users
// type it (dashes), "--name" alone for a bool, "--name=..." for an empty
// default; help wrapped to 100 columns. The flag's own help string is the
// one text, so --help and the flags cannot disagree.
std::string FlagsHelp(absl::string_view defined_in);

// Rewrites "--fail-over" to "--fail_over" (and "--debug-dir=x" to
// "--debug_dir=x") in place, up to a "--": absl names flags with
// underscores, users type dashes.
void NormalizeDashedFlags(int argc, char** argv);

// argv with each "--name" "-" pair, where --name takes a value (not a
// bool), joined into "--name=-" (held by `storage`), up to a "--". absl
// prints "Did you really mean to set flag 'name' to the value '-'?" for the
// pair; "-" is a value here: standard input (--rules -) or a value the
// command refuses with its own message (--html -). The result ends with a
// null pointer, as argv does: its argc is size() - 1.
std::vector<char*> JoinDashValues(int argc, char** argv, std::vector<std::string>* storage);

// Checks every flag in argv against absl's registry (known, has a value,
// the value parses) without exiting, so the caller can turn a problem into
// exit code 2. Call before absl::ParseCommandLine, which then cannot fail.
absl::Status CheckFlags(int argc, char** argv);

// "4096", "64KiB", "10MiB", "1.5GiB", "2G", "512K" (binary units; B optional).
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// --max-snapshot-size: a size (ParseByteSize) from 1 byte to the 2 GiB - 1
// libprotobuf can parse; the message names the flag.
absl::StatusOr<uint64_t> ParseMaxSnapshotSize(absl::string_view text);

// Standard input ("-") can be read once: an error naming the problem when
// `paths` (snapshots, --rules) has it more than once.
absl::Status CheckStdinOnce(const std::vector<std::string>& paths);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_CLI_H_
