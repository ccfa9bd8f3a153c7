// process_lineage: who another process is, from /proc, for the shim's
// endpoints that hand their address over from a wrapper to the program it
// runs (net/control_server.h's /handover, net/front_door.h's handover):
// its parent chain, the TCP sockets it holds, and whether it listens on a
// port.
//
// Called from the shim's own threads only (the control thread, the front
// door's relay thread): each call opens and reads /proc files through
// base/own_fds.h, with short non-blocking reads, and keeps its scratch on
// the caller's stack (4 KiB). Never allocates from the host heap; errno is
// not preserved.
#ifndef RETAIN_SHIM_SRC_NET_PROCESS_LINEAGE_H_
#define RETAIN_SHIM_SRC_NET_PROCESS_LINEAGE_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// The parent of `pid` from /proc/PID/stat; -1 if unknown.
int ParentOf(int pid);

// True when `pid` descends from this process (its ppid chain, at most 64
// steps, reaches getpid()).
bool IsDescendant(int pid);

// A decimal number of 1 to 19 digits, the whole of [text, text + length).
uint64_t ParseProcDecimal(const char* text, size_t length, bool* ok);

// The socket inode and owner (uid) of the TCP connection from `from` to
// `to`, from /proc/net/tcp (or tcp6). Reads at most 256 MiB of it.
bool FindTcpSocket(const struct sockaddr_storage& from, const struct sockaddr_storage& to,
                   uint64_t* inode, uint64_t* uid);

// True when process `pid` has socket inode `inode` open.
bool HoldsSocket(int pid, uint64_t inode);

// True when process `pid` holds a socket listening on TCP `port` of the
// address `addr` (4 bytes, or 16 with `ipv6`) or of the wildcard address
// that covers it (0.0.0.0; [::], which also takes IPv4 connections).
bool ListensOnPort(int pid, bool ipv6, const unsigned char* addr, uint16_t port);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_PROCESS_LINEAGE_H_
