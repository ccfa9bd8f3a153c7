// front_door: request tags for servers that make their own system calls
// (Go's net/http, io_uring, statically linked network stacks), which the
// HTTP sniffer (net/socket_table.h) never sees.
//
// RETAIN_FRONT_DOOR=LISTEN:TARGET: the shim listens on the loopback port
// LISTEN and relays each connection to the server's loopback port TARGET,
// reading the HTTP it relays (net/relay.h), so each request opens a tag and
// RETAIN_SNAPSHOT_EVERY works whatever the server is made of. Clients use
// LISTEN instead of TARGET; the bytes are relayed unchanged both ways.
//
//  - One thread ("retain-door", busy for its whole life, every signal
//    blocked) runs one edge-triggered epoll loop over non-blocking sockets;
//    it never runs the host's code and never allocates from the host heap.
//    Connections' memory (two 16 KiB buffers each) is mapped on first use
//    and reused.
//  - At most kMaxFrontDoorConnections (192, base/own_fds.h) connections at
//    once; beyond, the listener is not accepted on until one ends (new
//    clients wait in the kernel's backlog, as with a busy server).
//  - The server is connected to per client connection, so it may start
//    listening after the shim started; a refused connection gets
//    "502 Bad Gateway" (Connection: close) and is closed.
//  - Its descriptors are the shim's (base/own_fds.h): in the shim's range
//    near the top of the table, close-on-exec, out of the host's close and
//    dup2. Each connection holds two of the process's RLIMIT_NOFILE.
//  - The front door belongs to the process that was meant to be profiled,
//    as the control endpoint does (net/control_server.h): a fork child
//    closes its copies (base/own_fds.h's ShimFdsResetInChild) and never
//    serves; a process that finds LISTEN held by another process under the
//    shim (a wrapper: sh, timeout, env) asks it over an abstract Unix socket
//    (@retain-front-door/UID/ADDRESS:PORT, the kernel naming the asker:
//    SO_PEERCRED), and the holder lets go only to a descendant of its own
//    (net/process_lineage.h), of its user, and only if it does not itself
//    listen on TARGET (then it is the server). LISTEN held by a program
//    without the shim is a start-up configuration error.
//  - Connections from the front door to the server are not also followed
//    by the sniffer: each request is tagged once.
#ifndef RETAIN_SHIM_SRC_NET_FRONT_DOOR_H_
#define RETAIN_SHIM_SRC_NET_FRONT_DOOR_H_

#include <cstdint>

namespace retain::shim {

// From the shim's constructor: listens on RETAIN_FRONT_DOOR's LISTEN (or,
// held by a wrapper under the shim, starts asking for it) and starts the
// relay thread. Does nothing when it is off; a failure says why (a
// configuration error) and leaves it off. Preserves errno.
void StartFrontDoor();

// From the shim's destructor: no new connections; the ones open are
// relayed while the process lasts. Preserves errno.
void StopFrontDoor();

// From the atfork child handler, after ShimFdsResetInChild: the child has
// no front door.
void FrontDoorResetInChild();

// True when `fd` (a socket the host accepted) is connected to one of the
// front door's own sockets to the server. For net/socket_table.cc, at the
// connection's first bytes. Preserves errno.
bool IsFromFrontDoor(int fd);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_FRONT_DOOR_H_
