// input_file: how the tools open and read the files they are given, so that
// no input can hang them or make them read without bound: a snapshot, a
// rules file, a module or debug file a snapshot names.
//
// Every file is opened with O_NONBLOCK (opening a FIFO for reading would
// otherwise wait for a writer, forever) and checked with fstat after the
// open, on the descriptor itself (no window for the path to change): only
// regular files are read, and only up to a size given by the caller, checked
// before the first byte is read. Standard input ("-") may also be a pipe or
// a socket; it is read up to the same bound.
//
// Thread-compatible: no shared state. Every failure is an absl::Status whose
// message names the file and says what is wrong in one line.
#ifndef RETAIN_TOOLS_LIB_INPUT_FILE_H_
#define RETAIN_TOOLS_LIB_INPUT_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace retain::tool {

// The path that names standard input.
inline constexpr absl::string_view kStdinPath = "-";

// What a file is, for messages: "a directory", "a FIFO (named pipe)", "a
// character device", "a block device", "a socket", "a regular file", ...
std::string FileTypeName(mode_t mode);

// Opens `path` read-only (O_NONBLOCK, O_CLOEXEC) and returns the descriptor
// (the caller closes it) when it is a regular file of at most `max_bytes`
// bytes. `what` names the file's role in messages ("snapshot", "rules
// file"). Errors: NotFound (no such file), PermissionDenied, InvalidArgument
// ("X: is a FIFO (named pipe), not a regular file"; "X: 3.0 GiB is larger
// than the maximum ... (1.0 GiB)"; any other open or fstat failure).
absl::StatusOr<int> OpenRegularFile(absl::string_view path, uint64_t max_bytes,
                                    absl::string_view what);

// Reads the whole file (OpenRegularFile's checks, then at most its size at
// the time of the check, even if it grows meanwhile). `path` "-" reads
// standard input instead: a regular file, a pipe or a socket, read to its end
// and refused as soon as it holds more than `max_bytes`; a terminal or any
// other device is refused without reading. `max_flag`, when not empty, is the
// flag that raises the maximum, named in the too-large message.
absl::StatusOr<std::string> ReadBoundedFile(absl::string_view path, uint64_t max_bytes,
                                            absl::string_view what,
                                            absl::string_view max_flag = "");

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_INPUT_FILE_H_
