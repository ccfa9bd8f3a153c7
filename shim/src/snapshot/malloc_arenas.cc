// malloc_arenas: see snapshot/malloc_arenas.h.
#include "snapshot/malloc_arenas.h"

#include <errno.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#include <stdio.h>
#endif

#include "base/hook_table.h"
#include "base/thread_state.h"

namespace retain::shim {

#if defined(__GLIBC__)
namespace {

ssize_t WriteToParser(void* cookie, const char* data, size_t size) {
  static_cast<MallocInfoParser*>(cookie)->Feed(data, size);
  return static_cast<ssize_t>(size);
}

}  // namespace
#endif

MallocArenasResult ReadMallocArenas(MallocArenaSink sink, void* context) {
  MallocArenasResult result = {};
#if defined(__GLIBC__)
  BusyScope busy;
  const int saved_errno = errno;
  // Held until fclose has freed the FILE, so every block is given back
  // and the next snapshot's scope finds the private heap empty.
  PrivateHeapScope private_heap;
  if (private_heap.ok()) {
    const long page_size = sysconf(_SC_PAGESIZE);
    MallocInfoParser parser(page_size > 0 ? static_cast<uint64_t>(page_size) : 4096, sink, context);
    cookie_io_functions_t io = {};
    io.write = &WriteToParser;
    if (FILE* stream = fopencookie(&parser, "w", io)) {
      // Unbuffered: stdio allocates no buffer, and each fprintf reaches the
      // parser whole (glibc formats it on its stack first).
      setvbuf(stream, nullptr, _IONBF, 0);
      result.ran = malloc_info(0, stream) == 0;
      fclose(stream);
      result.complete = parser.Finish() && result.ran;
      result.arenas = parser.reported();
    }
  }
  errno = saved_errno;
#else
  (void)sink;
  (void)context;
#endif
  return result;
}

}  // namespace retain::shim
