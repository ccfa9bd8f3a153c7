// debug_file_search: where a module's DWARF is when the module file has
// none, searched like gdb does: by GNU build-id (DIR/.build-id/xx/rest.debug),
// by .gnu_debuglink (beside the file, in its .debug/, under each debug
// directory), by path under each debug directory, and the dwz supplementary
// file (.gnu_debugaltlink); every debug directory, the sysroot's
// /usr/lib/debug and /usr/lib/debug included (the symbolizer makes the
// list). A candidate is taken only if it is a regular ELF file of bounded
// size with DWARF, whose build-id matches, and is not the module file itself.
//
// The search runs as libdwfl's find_debuginfo callback (kDebugFileCallbacks)
// with a DebugSearch as the module's userdata. Thread-compatible: it reads
// only the DebugSearch it is given.
#ifndef RETAIN_TOOLS_LIB_DEBUG_FILE_SEARCH_H_
#define RETAIN_TOOLS_LIB_DEBUG_FILE_SEARCH_H_

#include <elfutils/libdwfl.h>

#include <string>
#include <vector>

namespace retain::tool::symbolizer_internal {

// What the find_debuginfo callback needs to know about a module.
struct DebugSearch {
  std::string module_path;  // as the snapshot recorded it
  std::string file_path;    // the file opened (sysroot applied)
  std::string sysroot;      // empty: none
  const std::vector<std::string>* dirs = nullptr;
};

// libdwfl's callbacks for a module reported from its file (offline, never a
// process): find_debuginfo searches as above, with the module's userdata a
// DebugSearch* that outlives the Dwfl session.
extern const Dwfl_Callbacks kDebugFileCallbacks;

}  // namespace retain::tool::symbolizer_internal

#endif  // RETAIN_TOOLS_LIB_DEBUG_FILE_SEARCH_H_
