// files: raw file I/O for the shim: no stdio (it allocates), EINTR and
// short transfers handled, errno preserved. The files the shim opens are
// held through base/own_fds.h (out of the host's descriptor range, out of its
// close_range and dup2). Not async-signal-safe (own_fds' lock).
#ifndef RETAIN_SHIM_SRC_BASE_FILES_H_
#define RETAIN_SHIM_SRC_BASE_FILES_H_

#include <errno.h>
#include <sys/types.h>

#include <cstddef>

namespace retain::shim {

// The shim's one write loop: calls `write_once(pointer, size)` (a write(2)
// of at most `size` bytes from `pointer`: its count, or -1 with errno) until
// all of `data` is written. EINTR is retried; an error or a zero count ends
// it with false (errno as the last call left it). Async-signal-safe when
// `write_once` is; allocates nothing.
template <typename WriteOnce>
bool WriteAll(WriteOnce write_once, const void* data, size_t size) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write_once(p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads up to size-1 bytes of `path` into `buffer` and NUL-terminates.
// Returns the byte count, or -1 (then *open_error, if given, is the open's
// errno, 0 when a read failed).
ssize_t ReadSmallFile(const char* path, char* buffer, size_t size, int* open_error = nullptr);

// Reads `path`, `size` bytes at a time into `buffer`, handing each piece to
// `consume(piece, length, context)` (pieces split lines anywhere) until the
// file ends or `consume` returns false. For files of any size
// (/proc/self/maps); allocates nothing. False when the file cannot be opened
// (then *open_error, if given, is the open's errno; else it is set to 0) or
// a read fails.
bool ReadFileInPieces(const char* path, char* buffer, size_t size,
                      bool (*consume)(const char* piece, size_t length, void* context),
                      void* context, int* open_error = nullptr);

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
