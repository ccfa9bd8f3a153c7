// socket_table: the accepted sockets whose HTTP conversation the shim
// follows (RETAIN_HTTP), by file descriptor, each with its HttpSniffer and
// the tags of the requests it has open, oldest first.
//
// A connection that comes from the shim's own front door (net/front_door.h)
// is left to it: the front door tags its requests, once. It is recognised
// at its first inbound bytes (its peer is a front-door port), which the
// front door sends only after it has noted its port.
//
// Pages of 256 descriptors are mapped on first use, so an untracked
// descriptor costs one load to rule out. A connection's state is guarded by
// its own lock; events are turned into tag operations by the caller after
// the lock is dropped (ending a request may write a snapshot).
//
// Thread-safe. Never allocates from the host heap.
#ifndef RETAIN_SHIM_SRC_NET_SOCKET_TABLE_H_
#define RETAIN_SHIM_SRC_NET_SOCKET_TABLE_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// From accept/accept4: start following `fd`.
void TrackAcceptedSocket(int fd);
// From accept/accept4, whatever RETAIN_HTTP says: the host accepted a
// connection. HostAcceptCount() says how many so far (the control endpoint
// keeps itself for a process that serves: net/control_server.h).
void CountHostAccept();
uint64_t HostAcceptCount();
// From close: the connection ends; its open requests end.
void SocketClosed(int fd);
// Whether RETAIN_HTTP_PATHS lets a request for `path` open a tag (shared
// with the front door, net/relay.h).
bool HttpPathWanted(const char* path);
// True when `fd` is followed (cheap; for the read/write hooks' fast path).
bool IsTrackedSocket(int fd);
// Bytes the host read from / wrote to a followed socket (the host's buffers,
// only inspected).
void SocketInbound(int fd, const char* data, size_t size);
void SocketOutbound(int fd, const char* data, size_t size);
// The same for scatter/gather calls: the first `total` bytes of `iov`.
void SocketInboundVector(int fd, const struct iovec* iov, int count, size_t total);
void SocketOutboundVector(int fd, const struct iovec* iov, int count, size_t total);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_SOCKET_TABLE_H_
