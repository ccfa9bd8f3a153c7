// symbolizer: turns return addresses captured in a traced process into
// functions, files and lines, offline, from the module table of the snapshot
// that recorded them (path, GNU build-id, load bias) and the modules' DWARF,
// read with elfutils libdw.
//
// A module whose file is gone, or whose build-id differs from the one the
// snapshot recorded (the library was rebuilt or upgraded since), is reported
// once in Warnings() and its addresses come back as module+offset only: a
// wrong function name is worse than none.
//
// Module files and separate debug files are opened only when they are
// regular files of at most kMaxModuleFileBytes (a FIFO, a device or a larger
// file is reported like a missing one), with O_NONBLOCK so that a path
// naming a FIFO never blocks, and each is read through the one descriptor
// that was checked.
//
// Results are cached per (module build-id or path, offset), so symbolizing
// the same stack frames across many snapshots of one process costs one
// lookup each. Thread-compatible: one Symbolizer per thread.
#ifndef RETAIN_TOOLS_LIB_SYMBOLIZER_H_
#define RETAIN_TOOLS_LIB_SYMBOLIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "retain.pb.h"

namespace retain::tool {

// The largest module or debug file read: 8 GiB. libdw maps files rather than
// reading them whole, and the largest shared libraries with DWARF (CUDA and
// deep-learning runtimes) stay within a few GiB.
inline constexpr uint64_t kMaxModuleFileBytes = uint64_t{8} << 30;

// One source-level frame. An address inside inlined code yields several:
// the innermost inlined function first, the function it was inlined into
// last.
struct SourceFrame {
  std::string function;  // demangled ("server_prompt_cache::alloc(...)"); empty if unknown
  std::string file;      // as DWARF names it; empty if unknown
  int line = 0;          // 0 if unknown
  int column = 0;
  bool inlined = false;  // true for every frame but the last
};

struct SymbolizedAddress {
  // Path of the module containing the address, as the snapshot recorded it;
  // empty when no module contains it (JIT code, a broken stack).
  std::string module;
  // Address in the module's own ELF address space (address - load_bias).
  uint64_t module_offset = 0;
  // Empty when the module's debug information was unavailable; then
  // callers show "module+0xoffset".
  std::vector<SourceFrame> frames;
};

struct SymbolizerOptions {
  // Directories searched for separate debug files: DIR/.build-id/xx/rest.debug
  // and DIR/<module path>.debug / DIR/<module path> (like gdb's
  // debug-file-directory). /usr/lib/debug is always searched last.
  std::vector<std::string> debug_dirs;
  // Prefix for every module path (the snapshot came from another root, a
  // container or another machine).
  std::string sysroot;
};

// What the caches saved, for tests and benchmarks (bench/symbolizer_bench).
struct SymbolizerStats {
  uint64_t lookups = 0;              // Symbolize() calls
  uint64_t address_misses = 0;       // addresses new to a snapshot's index
  uint64_t dwarf_lookups = 0;        // module offsets looked up in DWARF: each once
  uint64_t module_files_opened = 0;  // module files opened: each module once
};

class Symbolizer {
 public:
  explicit Symbolizer(SymbolizerOptions options = {});
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Symbolizes a frame of a stack recorded in `snapshot`. Every frame the
  // shim records is a return address (the first included), so the lookup
  // uses address - 1, inside the call instruction. `frame_index` is the
  // frame's position in the stack, kept for callers' bookkeeping.
  const SymbolizedAddress& Symbolize(const v1::Snapshot& snapshot, uint64_t address,
                                     int frame_index);

  // Problems with modules, one line each, each reported once; cleared by
  // the call. E.g. "/usr/lib/libfoo.so: build-id differs from the snapshot's
  // (the file was replaced); showing module+offset".
  std::vector<std::string> TakeWarnings();

  SymbolizerStats Stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// "module+0x1234" with the module's base name; "0x7f..." when there is none.
std::string ModuleOffsetString(const SymbolizedAddress& address, uint64_t raw_address);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_SYMBOLIZER_H_
