// dwarf_module: one module file opened with libdwfl (offline, one Dwfl
// session per file) and the source frames of its addresses: function
// (demangled; from the ELF symbol where DWARF names none), file:line:column,
// and the chain of inlined calls, innermost first. DWARF is indexed per
// compilation unit on first use: the function and inlined-instance ranges
// of the unit, as a tree, so a lookup is a binary search and a short
// descent instead of a walk over the unit's DIEs. Separate debug files are
// found by debug_file_search.
//
// Thread-compatible: a DwarfModule and its libdw handles belong to one
// Symbolizer.
#ifndef RETAIN_TOOLS_LIB_DWARF_MODULE_H_
#define RETAIN_TOOLS_LIB_DWARF_MODULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/lib/symbolizer.h"

namespace retain::tool::symbolizer_internal {

class DwarfModule {
 public:
  virtual ~DwarfModule() = default;

  // The GNU build-id of the file libdwfl opened; empty if none.
  virtual std::string BuildId() const = 0;

  // Source frames for a module address (a return address minus one);
  // empty when nothing is known.
  virtual std::vector<SourceFrame> Lookup(uint64_t pc) = 0;
};

// Reads the module from `fd`, an open regular file (`file_path` names it in
// messages and debuglink searches; `module_path` is the path the snapshot
// recorded); libdwfl owns `fd` on success, the caller keeps it otherwise.
// Never opens `file_path` again, so the file checked is the file read.
// Separate debug files are searched in `dirs` (which must outlive the
// module) and under `sysroot`. nullptr if it cannot (dwfl_errmsg says why).
std::unique_ptr<DwarfModule> OpenDwarfModule(const std::string& module_path,
                                             const std::string& file_path, int fd,
                                             const std::string& sysroot,
                                             const std::vector<std::string>* dirs);

}  // namespace retain::tool::symbolizer_internal

#endif  // RETAIN_TOOLS_LIB_DWARF_MODULE_H_
