// control_server: the control endpoint (RETAIN_CONTROL), a tiny HTTP/1.1
// server for scripts, on its own thread (named "retain-ctl").
//
//   POST /snapshot[?label=L]   writes a snapshot; 200 with its path
//   GET  /snapshot[?label=L]   writes one and returns its bytes
//   POST /mark?request=ID      opens a request tag (source CONTROL); it is
//                              nobody's thread tag, so it is the process-latest
//   POST /mark/end             closes the most recent tag opened by /mark
//   GET  /stats                JSON: pid, live bytes/counts per kind,
//                              requests, arena bytes, dropped records
//   GET  /metrics              the same in Prometheus text format
//   POST /handover             another process asks for the endpoint (below)
//
// It listens on a Unix socket (created mode 0600) or a loopback TCP port
// only (base/config.cc refuses anything else). Labels are [A-Za-z0-9._-]{1,64}
// and never become a path: snapshots land in RETAIN_DIR under the writer's
// own names.
//
// No client can hold it. One poll() loop over non-blocking sockets serves up
// to kMaxConnections (8) connections side by side, one request each
// (Connection: close), each given its turn of one read or write per loop:
//  - a request (head and body together) must arrive within 5 s of the
//    connection (kRequestDeadlineMs), else 408 and the connection is closed;
//    the time is the connection's, not a per-read timeout;
//  - a response must make progress every 10 s and be out within 120 s
//    (a GET /snapshot to a slow reader is cut there; it never holds the
//    loop, which writes only what the socket takes);
//  - a connection beyond the eight takes the slot of the oldest one that has
//    sent its response (draining), else of the oldest one still sending its
//    request (that one gets 503); when all eight are answering, the new one
//    gets 503;
//  - at most RETAIN_CONTROL_RATE (default 5) snapshots in any one second,
//    POST and GET together; beyond, 429 with Retry-After;
//  - the head is parsed by length (net/control_request.h): at most 8 KiB (431),
//    a body of at most 4 KiB read and dropped (413; Transfer-Encoding 501),
//    and a NUL or other control byte, a bad request line or header is 400.
// The thread blocks only in poll() and while it writes a snapshot.
//
// The endpoint belongs to the process that was meant to be profiled:
//  - a fork child never holds it: its copies of the listener and of the
//    connections are closed in the atfork child handler (exec closes them
//    too: close-on-exec);
//  - a process that finds the address held by a live process (the Unix
//    path accepts connections, or the TCP port is in use) asks that holder
//    with POST /handover, from its control thread (start-up does not wait).
//    The holder identifies the asker (Unix: SO_PEERCRED; TCP: the asker
//    names its pid, ?pid=N, and the holder believes it only if that
//    process, of the same user, holds the connection's other end: its
//    socket inode from /proc/net/tcp{,6} among /proc/N/fd) and lets go
//    (closes its listener, removes the file, then answers 200) only if the
//    asker is its descendant (the ppid chain in /proc) and it has itself
//    never accepted a connection (net/socket_table.h's count) and runs on
//    one thread (base/threads.h's ProgramIsThreaded): it is a wrapper such
//    as timeout or sh, not a server. The asker then binds. Otherwise it
//    answers 403, and the asker goes without an endpoint and says why in
//    RETAIN_LOG: a server keeps its endpoint when the helpers it spawns
//    inherit LD_PRELOAD, also a threaded one (a JVM) that spawns them before
//    its first request. (A single-threaded server that accepts without
//    libc's accept, io_uring's, counts as a wrapper; so does one that spawns
//    before its first accept.);
//  - a socket nobody accepts on (a process that crashed, or exec'd: nice,
//    env) is stale: removed and bound again. A file that is not a socket is
//    never touched;
//  - at exit (the shim's destructor) the socket file is removed if the path
//    still names the socket this process bound (device and inode), so never
//    a successor's. A process killed by a signal leaves it stale.
//
// Its descriptors are the host's problem as little as possible: they live
// in base/own_fds.h's range near the top of the soft RLIMIT_NOFILE (at most
// 1024), close-on-exec, out of reach of the host's close, close_range,
// closefrom, dup2 and dup3, and checked by device and inode before every
// use, so the endpoint never accepts on, reads or writes a number that has
// become the host's. A listener the host closed behind the hooks' back is
// bound again (at most once a second).
//
// The thread is busy (g_thread.busy) for its whole life, so nothing it does
// is recorded and the shim's socket hooks pass its calls straight through;
// it blocks every signal, never allocates from the host heap, and speaks
// only through LogDiagnostic (RETAIN_LOG=1). Only start-up problems
// (RETAIN_CONTROL names something unusable) are warnings.
#ifndef RETAIN_SHIM_SRC_NET_CONTROL_SERVER_H_
#define RETAIN_SHIM_SRC_NET_CONTROL_SERVER_H_

#include <cstddef>

namespace retain::shim {

// From the shim's constructor: binds the endpoint RETAIN_CONTROL names (or,
// the Unix path being held, starts asking for it) and starts the thread
// serving it. Does nothing when the endpoint is off; a failure to bind says
// why (a warning) and leaves it off. Preserves errno.
void StartControlServer();

// From the shim's destructor, before the exit snapshot: no more requests;
// removes the socket file if it is still this process's. Preserves errno.
void StopControlServer();

// From the atfork child handler, after ShimFdsResetInChild: the child has no
// endpoint and owns no socket file.
void ControlServerResetInChild();

// True if `label` is a non-empty [A-Za-z0-9._-] string of at most 64 bytes.
// Exposed for tests.
bool IsValidControlLabel(const char* label, size_t length);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_CONTROL_SERVER_H_
