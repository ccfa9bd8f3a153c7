// files: raw file I/O for the shim: no stdio (it allocates), EINTR and
// short transfers handled, errno preserved. The files the shim opens are
// held through base/own_fds.h (out of the host's descriptor range, out of its
// close_range and dup2). Not async-signal-safe (own_fds' lock).
#ifndef RETAIN_SHIM_SRC_BASE_FILES_H_
#define RETAIN_SHIM_SRC_BASE_FILES_H_

#include <sys/types.h>

#include <cstddef>

namespace retain::shim {

// Reads up to size-1 bytes of `path` into `buffer` and NUL-terminates.
// Returns the byte count, or -1.
ssize_t ReadSmallFile(const char* path, char* buffer, size_t size);

// A file the shim writes: open (ShimOpen's handle, or -1 with errno), write
// all of `data` (false on error, or when the host took the descriptor over
// behind the hooks), close.
int OpenShimFile(const char* path, int flags, unsigned int mode);
bool WriteAllToShimFile(int handle, const void* data, size_t size);
void CloseShimFile(int handle);

// Value in bytes of a "Key:   1234 kB" line of /proc status-style text;
// 0 when absent.
unsigned long long ProcKilobytesField(const char* text, const char* key);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_FILES_H_
