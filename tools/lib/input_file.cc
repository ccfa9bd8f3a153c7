// input_file: see input_file.h.
#include "tools/lib/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/byte_size.h"

namespace retain::tool {
namespace {

// Closes a file descriptor on every return path unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

absl::Status OpenError(absl::string_view path, int error) {
  std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InvalidArgumentError(message);
  }
}

std::string MaximumNote(uint64_t max_bytes, absl::string_view max_flag) {
  return absl::StrCat(HumanBytes(max_bytes), max_flag.empty() ? "" : "; ", max_flag,
                      max_flag.empty() ? "" : " raises it");
}

absl::Status TooLarge(absl::string_view name, uint64_t size, uint64_t max_bytes,
                      absl::string_view what, absl::string_view max_flag) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", size, " bytes (", HumanBytes(size),
                                                 ") is larger than the largest ", what, " read (",
                                                 MaximumNote(max_bytes, max_flag), ")"));
}

// Reads until `size` bytes are in or the file ends (it may have shrunk: the
// caller's checks then see a short file).
absl::Status ReadUpTo(int fd, absl::string_view name, size_t size, std::string* bytes) {
  bytes->resize(size);
  size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, bytes->data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": read failed: ", std::strerror(errno)));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  bytes->resize(done);
  return absl::OkStatus();
}

// Standard input as a stream (a pipe or a socket): read to its end, in
// pieces, refused once it holds more than `max_bytes`.
absl::StatusOr<std::string> ReadStream(int fd, absl::string_view name, uint64_t max_bytes,
                                       absl::string_view what, absl::string_view max_flag) {
  // A pipe handed over with O_NONBLOCK set (by whoever made it) would fail
  // reads with EAGAIN while the writer is slow; wait for it instead.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": read failed: ", std::strerror(errno)));
    }
    if (n == 0) return bytes;
    if (bytes.size() + static_cast<size_t>(n) > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": more than the largest ", what,
                                                     " read (", MaximumNote(max_bytes, max_flag),
                                                     ")"));
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> ReadStdin(uint64_t max_bytes, absl::string_view what,
                                      absl::string_view max_flag) {
  constexpr absl::string_view kName = "stdin";
  struct stat st;
  if (fstat(STDIN_FILENO, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": cannot stat: ", std::strerror(errno)));
  }
  if (S_ISREG(st.st_mode)) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size > max_bytes) return TooLarge(kName, size, max_bytes, what, max_flag);
    std::string bytes;
    if (absl::Status read = ReadUpTo(STDIN_FILENO, kName, size, &bytes); !read.ok()) return read;
    return bytes;
  }
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
    return ReadStream(STDIN_FILENO, kName, max_bytes, what, max_flag);
  }
  return absl::InvalidArgumentError(absl::StrCat(kName, ": is ", FileTypeName(st.st_mode),
                                                 ", not a file or a pipe to read a ", what,
                                                 " from"));
}

}  // namespace

std::string FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

absl::StatusOr<int> OpenRegularFile(absl::string_view path, uint64_t max_bytes,
                                    absl::string_view what) {
  const std::string path_string(path);
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer. It changes
  // nothing for the regular files read after the check below.
  int fd = open(path_string.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return OpenError(path, errno);
  FdCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", FileTypeName(st.st_mode), ", not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) return TooLarge(path, size, max_bytes, what, "");
  return closer.release();
}

absl::StatusOr<std::string> ReadBoundedFile(absl::string_view path, uint64_t max_bytes,
                                            absl::string_view what, absl::string_view max_flag) {
  if (path == kStdinPath) return ReadStdin(max_bytes, what, max_flag);
  const std::string path_string(path);
  int fd = open(path_string.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return OpenError(path, errno);
  FdCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a ", what));
  }
  if (S_ISFIFO(st.st_mode)) {
    // Process substitution (<(cat x.pb)) lands here too: say how to pipe.
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a FIFO (named pipe), not a regular file; to read a ", what,
                     " from a pipe, give - and pipe it to standard input"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", FileTypeName(st.st_mode), ", not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) return TooLarge(path, size, max_bytes, what, max_flag);
  std::string bytes;
  if (absl::Status read = ReadUpTo(fd, path, static_cast<size_t>(size), &bytes); !read.ok()) {
    return read;
  }
  return bytes;
}

}  // namespace retain::tool
