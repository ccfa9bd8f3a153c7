// files: see base/files.h.
#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/own_fds.h"

namespace retain::shim {
namespace {

constexpr size_t kWriteChunk = size_t{1} << 20;

}  // namespace

ssize_t ReadSmallFile(const char* path, char* buffer, size_t size, int* open_error) {
  int saved = errno;
  int handle = ShimOpen(path, O_RDONLY);
  if (open_error != nullptr) *open_error = handle < 0 ? errno : 0;
  if (handle < 0) {
    errno = saved;
    return -1;
  }
  size_t total = 0;
  {
    ShimFdUse use(handle);
    while (use.fd() >= 0 && total + 1 < size) {
      ssize_t n = syscall(SYS_read, use.fd(), buffer + total, size - 1 - total);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      total += static_cast<size_t>(n);
    }
  }
  buffer[total] = '\0';
  ShimFdClose(handle);
  errno = saved;
  return static_cast<ssize_t>(total);
}

bool ReadFileInPieces(const char* path, char* buffer, size_t size,
                      bool (*consume)(const char* piece, size_t length, void* context),
                      void* context, int* open_error) {
  int saved = errno;
  int handle = ShimOpen(path, O_RDONLY);
  if (open_error != nullptr) *open_error = handle < 0 ? errno : 0;
  if (handle < 0) {
    errno = saved;
    return false;
  }
  bool ok = true;
  for (;;) {
    ssize_t n;
    {
      // One read per hold: the lock is shared with the host's close_range
      // and dup2 hooks, and `consume` may take its time.
      ShimFdUse use(handle);
      if (use.fd() < 0) {
        ok = false;
        break;
      }
      n = syscall(SYS_read, use.fd(), buffer, size);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0 || !consume(buffer, static_cast<size_t>(n), context)) break;
  }
  ShimFdClose(handle);
  errno = saved;
  return ok;
}

int OpenShimFile(const char* path, int flags, unsigned int mode) {
  return ShimOpen(path, flags, mode);
}

bool WriteAllToShimFile(int handle, const void* data, size_t size) {
  return WriteAll(
      [handle](const char* p, size_t left) -> ssize_t {
        // One write per hold: the lock is shared with the host's
        // close_range and dup2 hooks.
        ShimFdUse use(handle);
        if (use.fd() < 0) {
          errno = EBADF;
          return -1;
        }
        return syscall(SYS_write, use.fd(), p, left < kWriteChunk ? left : kWriteChunk);
      },
      data, size);
}

void CloseShimFile(int handle) { ShimFdClose(handle); }

unsigned long long ProcKilobytesField(const char* text, const char* key) {
  size_t key_length = strlen(key);
  for (const char* line = text; line != nullptr && *line != '\0';) {
    if (strncmp(line, key, key_length) == 0 && line[key_length] == ':') {
      const char* p = line + key_length + 1;
      while (*p == ' ' || *p == '\t') ++p;
      unsigned long long value = 0;
      for (; *p >= '0' && *p <= '9'; ++p) value = value * 10 + static_cast<unsigned>(*p - '0');
      return value * 1024;
    }
    line = strchr(line, '\n');
    if (line != nullptr) ++line;
  }
  return 0;
}

}  // namespace retain::shim
