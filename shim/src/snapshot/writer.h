// writer: streams a snapshot (proto/retain.proto) of the live
// tables, the module table, process memory and the shim's health to
// $RETAIN_DIR/<exe>.<pid>.<seq>.pb.
//
// The file is written as $RETAIN_DIR/.<exe>.<pid>.<seq>.pb.tmp and renamed
// into place only when complete: a half-written snapshot never exists under
// its final name. It ends with a footer (Snapshot.footer: the length and
// CRC-32 of every byte before it, computed while streaming), so that a reader
// tells a copy that was cut or damaged later from a whole one. The tables
// are copied as of one instant, with every lock held at once: the mappings
// lock and every shard lock of every live table (snapshot/capture.h);
// allocating threads wait for that copy (a few milliseconds per hundred
// thousand records), never for the encoding (snapshot/encoding.h) or the
// disk (snapshot/file_output.h, snapshot/writer.cc).
//
// Thread-safe (writes are serialized). Takes locks and the loader lock: call
// from normal context only, never from a signal handler, nor from a hook
// while the thread holds a lock of the shim's (the every-N snapshots and a
// single-threaded program's are written from hooks, at points where it
// holds none: snapshot/triggers.h). Uses tens of KiB of stack. Never
// allocates from the host heap (buffers are arena pages).
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_WRITER_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_WRITER_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// Values of retain.v1.Trigger.
enum class Trigger : uint32_t {
  kExit = 1,
  kSignal = 2,
  kApi = 3,
  kControl = 4,
  kEveryNRequests = 5,
  kInterval = 6,
  kStopSignal = 7,
};

// Writes one snapshot. `label` may be null. `requests_at_trigger` is the
// number of requests that had ended when it was asked for
// (Header.requests_at_trigger); WriteSnapshot takes ClosedTagCount() now.
// On success returns true and, if `path_out` is given, the final path. On
// failure records why for the next snapshot's health block and RETAIN_LOG.
// An every-N snapshot whose count is not above the last every-N snapshot's
// is not written (a newer one already covers it) and returns false. Nor is
// an interval or every-N snapshot once the exit snapshot was taken: the
// exit snapshot stays the process's last of those (other libraries'
// destructors may run for a while after the shim's), and RETAIN_KEEP never
// drops it for a snapshot of the teardown.
bool WriteSnapshot(Trigger trigger, const char* label, char* path_out, size_t path_size);
bool WriteSnapshotAt(Trigger trigger, const char* label, uint64_t requests_at_trigger,
                     char* path_out, size_t path_size);

enum class WriteOutcome : uint8_t {
  kWritten,
  kFailed,      // tried and could not (recorded as above)
  kBusy,        // another snapshot is being written: nothing done
  kSuperseded,  // an every-N snapshot with this count or a newer one exists, or
                // (interval, every-N) the exit snapshot was taken
};
// WriteSnapshotAt, but never waits for a snapshot another thread is writing.
WriteOutcome TryWriteSnapshot(Trigger trigger, const char* label, uint64_t requests_at_trigger);

// fork(): prepare waits for a write in progress; the child starts its own
// sequence at 1.
void SnapshotWriterLockForFork();
void SnapshotWriterUnlockForFork();
void SnapshotWriterResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_WRITER_H_
