// elf_file: the symbolizer's ELF file reading: a descriptor that closes
// itself, libelf handles, an ELF file's GNU build-id and whether it carries
// DWARF, and the path arithmetic the debug-file search needs. Module files
// are opened by the caller (input_file.h's OpenRegularFile: regular files of
// bounded size only); these functions read through the descriptor given.
//
// Thread-compatible: no shared state (libelf's elf_version is set once per
// process, idempotently).
#ifndef RETAIN_TOOLS_LIB_ELF_FILE_H_
#define RETAIN_TOOLS_LIB_ELF_FILE_H_

#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace retain::tool::symbolizer_internal {

// Closes a descriptor unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Ends a libelf handle.
struct ElfDeleter {
  void operator()(Elf* elf) const { elf_end(elf); }
};
using ElfPtr = std::unique_ptr<Elf, ElfDeleter>;

// The ELF file open on `fd` (mapped, not read whole); nullptr when it is
// not one.
ElfPtr OpenElf(int fd);

// The GNU build-id note's bytes; empty when the file has none.
std::string ElfBuildId(Elf* elf);

// True when the file carries DWARF (a .debug_info section with contents).
bool HasDebugInfo(Elf* elf);

// Paths: the last component; everything before the last '/' ("" if none);
// `path` under `dir` (an absolute `path` too: "/srv" + "/usr/lib").
absl::string_view Basename(absl::string_view path);
absl::string_view Dirname(absl::string_view path);
std::string JoinPath(absl::string_view dir, absl::string_view path);

}  // namespace retain::tool::symbolizer_internal

#endif  // RETAIN_TOOLS_LIB_ELF_FILE_H_
