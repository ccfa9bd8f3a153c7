// file_util: raw file I/O for the shim: no stdio (it allocates), EINTR and
// short transfers handled, errno preserved. Async-signal-safe.
#ifndef RETAIN_SHIM_SRC_FILE_UTIL_H_
#define RETAIN_SHIM_SRC_FILE_UTIL_H_

#include <sys/types.h>

#include <cstddef>

namespace retain::shim {

// Reads up to size-1 bytes of `path` into `buffer` and NUL-terminates.
// Returns the byte count, or -1.
ssize_t ReadSmallFile(const char* path, char* buffer, size_t size);

// Writes all of `data`; false on error.
bool WriteAll(int fd, const void* data, size_t size);

// Value in bytes of a "Key:   1234 kB" line of /proc status-style text;
// 0 when absent.
unsigned long long ProcKilobytesField(const char* text, const char* key);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_FILE_UTIL_H_
