// process_lineage: see net/process_lineage.h.
#include "net/process_lineage.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/own_fds.h"

namespace retain::shim {
namespace {

// How far up the parent chain IsDescendant looks.
constexpr int kMaxAncestry = 64;

// The kernel's spelling of a TCP address in /proc/net/tcp and tcp6: the
// address's 32-bit words as stored, in hex, then the port ("0100007F:1F90").
bool ProcNetAddress(const struct sockaddr_storage& address, char* out, size_t size) {
  uint32_t words[4];
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(&address);
    memcpy(words, &in->sin_addr, 4);
    snprintf(out, size, "%08X:%04X", words[0], ntohs(in->sin_port));
    return true;
  }
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(&address);
    memcpy(words, &in6->sin6_addr, 16);
    snprintf(out, size, "%08X%08X%08X%08X:%04X", words[0], words[1], words[2], words[3],
             ntohs(in6->sin6_port));
    return true;
  }
  return false;
}

// Field `index` (0-based, space-separated) of the line [line, end).
bool LineField(const char* line, const char* end, int index, const char** field, size_t* length) {
  const char* p = line;
  for (int i = 0;; ++i) {
    while (p < end && *p == ' ') ++p;
    const char* start = p;
    while (p < end && *p != ' ') ++p;
    if (start == p) return false;
    if (i == index) {
      *field = start;
      *length = static_cast<size_t>(p - start);
      return true;
    }
  }
}

bool FieldIs(const char* field, size_t length, const char* text) {
  return strlen(text) == length && memcmp(field, text, length) == 0;
}

// Calls `visit(line, end)` for each line of the /proc/net table at `path`
// (the header too) until it returns true; lines over 511 bytes are skipped.
// Reads at most 256 MiB. True when a visit returned true.
template <typename Visit>
bool ScanProcNet(const char* path, Visit visit) {
  int file = ShimOpen(path, O_RDONLY);
  if (file < 0) return false;
  char scratch[4096];
  char line[512];
  size_t used = 0;
  bool found = false;
  uint64_t offset = 0;
  while (!found && offset < (uint64_t{256} << 20)) {
    ssize_t n;
    {
      ShimFdUse use(file);
      n = use.fd() < 0 ? -1 : pread(use.fd(), scratch, sizeof(scratch), static_cast<off_t>(offset));
    }
    if (n <= 0) break;
    offset += static_cast<uint64_t>(n);
    for (ssize_t i = 0; i < n && !found; ++i) {
      if (scratch[i] != '\n') {
        if (used < sizeof(line)) line[used++] = scratch[i];
        continue;
      }
      if (used < sizeof(line)) found = visit(line, line + used);
      used = 0;
    }
  }
  ShimFdClose(file);
  return found;
}

}  // namespace

// The parent of `pid` from /proc/PID/stat ("pid (comm) state ppid ..."; comm
// may hold spaces and parentheses, so the last ')' ends it). -1 if unknown.
int ParentOf(int pid) {
  char path[48];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int file = ShimOpen(path, O_RDONLY);
  if (file < 0) return -1;
  char text[512];
  ssize_t n;
  {
    ShimFdUse use(file);
    n = use.fd() < 0 ? -1 : pread(use.fd(), text, sizeof(text), 0);
  }
  ShimFdClose(file);
  if (n <= 0) return -1;
  const char* close_paren = nullptr;
  for (ssize_t i = n - 1; i >= 0; --i) {
    if (text[i] == ')') {
      close_paren = text + i;
      break;
    }
  }
  const char* end = text + n;
  // ") S 1234 "
  if (close_paren == nullptr || end - close_paren < 5) return -1;
  const char* p = close_paren + 4;
  int parent = 0;
  bool digits = false;
  for (; p < end && *p >= '0' && *p <= '9'; ++p) {
    parent = parent * 10 + (*p - '0');
    digits = true;
    if (parent > (1 << 22)) return -1;
  }
  return digits ? parent : -1;
}

bool IsDescendant(int pid) {
  int self = static_cast<int>(syscall(SYS_getpid));
  for (int step = 0; step < kMaxAncestry && pid > 1; ++step) {
    int parent = ParentOf(pid);
    if (parent < 0) return false;
    if (parent == self) return true;
    pid = parent;
  }
  return false;
}

uint64_t ParseProcDecimal(const char* text, size_t length, bool* ok) {
  uint64_t n = 0;
  *ok = length > 0 && length <= 19;
  for (size_t i = 0; *ok && i < length; ++i) {
    *ok = text[i] >= '0' && text[i] <= '9';
    n = n * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  return n;
}

bool FindTcpSocket(const struct sockaddr_storage& from, const struct sockaddr_storage& to,
                   uint64_t* inode, uint64_t* uid) {
  char local[64];
  char remote[64];
  if (!ProcNetAddress(from, local, sizeof(local)) || !ProcNetAddress(to, remote, sizeof(remote))) {
    return false;
  }
  const char* path = from.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6";
  return ScanProcNet(path, [&](const char* line, const char* end) {
    const char* field;
    size_t length;
    if (!LineField(line, end, 1, &field, &length) || !FieldIs(field, length, local) ||
        !LineField(line, end, 2, &field, &length) || !FieldIs(field, length, remote)) {
      return false;
    }
    bool ok_uid = false;
    bool ok_inode = false;
    if (LineField(line, end, 7, &field, &length)) *uid = ParseProcDecimal(field, length, &ok_uid);
    if (LineField(line, end, 9, &field, &length)) {
      *inode = ParseProcDecimal(field, length, &ok_inode);
    }
    return ok_uid && ok_inode && *inode != 0;
  });
}

// True when process `pid` has socket inode `inode` open.
bool HoldsSocket(int pid, uint64_t inode) {
  char path[48];
  snprintf(path, sizeof(path), "/proc/%d/fd", pid);
  int dir = ShimOpen(path, O_RDONLY | O_DIRECTORY);
  if (dir < 0) return false;
  char wanted[48];
  int wanted_length =
      snprintf(wanted, sizeof(wanted), "socket:[%llu]", static_cast<unsigned long long>(inode));
  char scratch[4096];
  bool found = false;
  for (int rounds = 0; !found && rounds < 4096; ++rounds) {
    long n;
    {
      ShimFdUse use(dir);
      n = use.fd() < 0 ? -1 : syscall(SYS_getdents64, use.fd(), scratch, sizeof(scratch));
    }
    if (n <= 0) break;
    for (long at = 0; at < n && !found;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      unsigned short record;
      memcpy(&record, scratch + at + 16, sizeof(record));
      const char* name = scratch + at + 19;
      if (record == 0) break;
      if (name[0] != '.') {
        char target[64];
        ssize_t length;
        {
          ShimFdUse use(dir);
          length = use.fd() < 0 ? -1 : readlinkat(use.fd(), name, target, sizeof(target));
        }
        found = length == wanted_length && memcmp(target, wanted, static_cast<size_t>(length)) == 0;
      }
      at += record;
    }
  }
  ShimFdClose(dir);
  return found;
}

bool ListensOnPort(int pid, bool ipv6, const unsigned char* addr, uint16_t port) {
  // The local addresses (as /proc/net spells them) a listener that takes
  // connections to addr:port may have: the address itself, the wildcard of
  // its family, and (IPv4) [::] and the v4-mapped address in tcp6.
  struct sockaddr_storage candidates[4];
  int count = 0;
  memset(candidates, 0, sizeof(candidates));
  auto v4 = [&](const unsigned char* bytes) {
    auto* in = reinterpret_cast<struct sockaddr_in*>(&candidates[count++]);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    memcpy(&in->sin_addr, bytes, 4);
  };
  auto v6 = [&](const unsigned char* bytes) {
    auto* in6 = reinterpret_cast<struct sockaddr_in6*>(&candidates[count++]);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    memcpy(&in6->sin6_addr, bytes, 16);
  };
  const unsigned char any[16] = {};
  if (ipv6) {
    v6(addr);
    v6(any);
  } else {
    unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memcpy(mapped + 12, addr, 4);
    v4(addr);
    v4(any);
    v6(mapped);
    v6(any);
  }
  uint64_t inodes[8];
  int found = 0;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const bool tcp6 = path[13] == '6';
    char wanted[4][64];
    int wanted_count = 0;
    for (int i = 0; i < count; ++i) {
      if ((candidates[i].ss_family == AF_INET6) != tcp6) continue;
      ProcNetAddress(candidates[i], wanted[wanted_count], sizeof(wanted[0]));
      ++wanted_count;
    }
    ScanProcNet(path, [&](const char* line, const char* end) {
      const char* field;
      size_t length;
      // st (field 3) 0A: TCP_LISTEN.
      if (!LineField(line, end, 3, &field, &length) || !FieldIs(field, length, "0A")) {
        return false;
      }
      if (!LineField(line, end, 1, &field, &length)) return false;
      bool match = false;
      for (int i = 0; i < wanted_count && !match; ++i) match = FieldIs(field, length, wanted[i]);
      bool ok = false;
      uint64_t inode = 0;
      if (match && LineField(line, end, 9, &field, &length)) {
        inode = ParseProcDecimal(field, length, &ok);
      }
      if (ok && inode != 0) inodes[found++] = inode;
      return found == 8;
    });
  }
  for (int i = 0; i < found; ++i) {
    if (HoldsSocket(pid, inodes[i])) return true;
  }
  return false;
}

}  // namespace retain::shim
