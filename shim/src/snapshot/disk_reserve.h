// disk_reserve: a snapshot never takes the last free space of the
// filesystem it is written to.
//
// Snapshots are one file per process and per trigger, and a process tree
// under LD_PRELOAD (a forking server, a build) writes many: RETAIN_KEEP and
// RETAIN_KEEP_BYTES bound each process's own series only. A full disk breaks
// the host (a database that cannot extend its files stops; found under
// PostgreSQL with connection churn), so before each snapshot the writer asks
// the filesystem for its free space and writes only when, after the
// snapshot, RETAIN_MIN_FREE would still be free. A snapshot not written for
// want of room is a failure like any other: counted in the next snapshot's
// health block and logged with RETAIN_LOG.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_DISK_RESERVE_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_DISK_RESERVE_H_

#include <cstddef>
#include <cstdint>

#include "base/config.h"

namespace retain::shim {

// The bytes to keep free on a filesystem of `filesystem_bytes`, for a
// RETAIN_MIN_FREE of `configured` (0 for none, or bytes); kAutoMinFree
// (the default) gives 5 % of the filesystem, at least 64 MiB and at most
// 1 GiB, so a filesystem smaller than 64 MiB takes no snapshot.
uint64_t ReserveBytes(uint64_t filesystem_bytes, uint64_t configured);

// True when a snapshot of about `expected_bytes` written to `dir` leaves
// the reserve free, or when the filesystem cannot say (the write then
// fails on its own if it must). Otherwise false, with a reason in `why`.
bool RoomForSnapshot(const char* dir, uint64_t expected_bytes, uint64_t configured, char* why,
                     size_t why_size);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_DISK_RESERVE_H_
