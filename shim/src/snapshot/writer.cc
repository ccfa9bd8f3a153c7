// writer: see snapshot/writer.h. This file is the snapshot's file: the
// writer's mutex and sequence numbers, $RETAIN_DIR, the temporary file and
// its rename into place, the record of failures; it runs the capture
// (snapshot/capture.h) and the encoding (snapshot/encoding.h) into an Output
// (snapshot/file_output.h), which ends the file with its footer.
//
// Thread and signal contract: as snapshot/writer.h says: writes are
// serialized by g_write_mutex, on a busy thread (BusyScope), never from a
// signal handler; nothing is taken from the host heap.
#include "snapshot/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/config.h"
#include "base/files.h"
#include "base/hook_table.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/thread_state.h"
#include "record/tag_table.h"
#include "snapshot/capture.h"
#include "snapshot/disk_reserve.h"
#include "snapshot/encoding.h"
#include "snapshot/file_output.h"
#include "snapshot/residency.h"
#include "snapshot/retention.h"
#include "unwind/module_table.h"

namespace retain::shim {
namespace {

pthread_mutex_t g_write_mutex = PTHREAD_MUTEX_INITIALIZER;
uint32_t g_sequence;           // guarded by g_write_mutex
uint64_t g_previous_write_us;  // guarded by g_write_mutex
// The size of the last snapshot written, for the room the next one needs;
// guarded by g_write_mutex.
uint64_t g_previous_bytes;
// What a snapshot is assumed to need before one was written.
constexpr uint64_t kFirstSnapshotBytes = uint64_t{256} << 10;
// requests_at_trigger of the last every-N snapshot written; guarded by g_write_mutex.
uint64_t g_newest_every_n;
// The exit snapshot was taken (written or tried); guarded by g_write_mutex.
bool g_exit_taken;

// Why the last snapshot could not be written, and how many could not: for
// the next snapshot's health block (the host's stderr is not the place).
uint64_t g_failed_snapshots;
char g_last_failure[256];

void RecordFailure(const char* format, ...) __attribute__((format(printf, 1, 2)));
void RecordFailure(const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(g_last_failure, sizeof(g_last_failure), format, args);
  va_end(args);
  ++g_failed_snapshots;
  LogWarning("%s", g_last_failure);
}

// 0, or the errno that keeps `dir` from holding snapshots.
int EnsureDirectory(const char* dir) {
  struct stat st;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  if (mkdir(dir, 0700) == 0 || errno == EEXIST) return 0;
  return errno;
}

bool WriteLocked(Trigger trigger, const char* label, uint64_t requests_at_trigger, char* path_out,
                 size_t path_size) {
  const Config& config = GetConfig();
  if (int error = EnsureDirectory(config.dir); error != 0) {
    RecordFailure("cannot write snapshots to RETAIN_DIR '%s': %s", config.dir, strerror(error));
    return false;
  }
  // Never the filesystem's last free space (snapshot/disk_reserve.h).
  char why[192];
  if (!RoomForSnapshot(
          config.dir,
          g_previous_bytes > kFirstSnapshotBytes ? g_previous_bytes : kFirstSnapshotBytes,
          config.min_free, why, sizeof(why))) {
    RecordFailure("snapshot not written: %s", why);
    return false;
  }
  // A program that exec()s itself keeps its pid and starts a new shim whose
  // sequence restarts: skip numbers the previous image already used rather
  // than overwrite its snapshots.
  char path[sizeof(config.dir) + 128];
  uint32_t sequence;
  struct stat existing;
  do {
    sequence = ++g_sequence;
    snprintf(path, sizeof(path), "%s/%s.%u.%u.pb", config.dir, ExeBaseName(), Pid(), sequence);
  } while (stat(path, &existing) == 0);
  char temp_path[sizeof(path) + 16];
  snprintf(temp_path, sizeof(temp_path), "%s/.%s.%u.%u.pb.tmp", config.dir, ExeBaseName(), Pid(),
           sequence);
  int file = OpenShimFile(temp_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (file < 0) {
    RecordFailure("cannot create %s: %s", temp_path, strerror(errno));
    return false;
  }
  uint64_t started_us = PreciseMicrosSinceStart();
  RefreshModules();
  bool ok;
  uint64_t residency_calls = 0;
  {
    // Residency is measured while the rows are encoded, after the capture
    // has let go of the tables' locks; large rows by the capture itself.
    ResidencyMeter meter;
    ResidencyTotals residency;
    const bool measured = meter.Begin();
    TableCapture capture;
    TagCapture tags;
    ok = CaptureTables(capture, measured ? &meter : nullptr) && tags.Capture();
    if (ok) CountTagBytes(capture, tags);
    Output output(file);
    IdSet referenced;
    if (ok) {
      EncodeHeader(output.buffer(), trigger, label, requests_at_trigger, sequence, capture,
                   measured);
      EncodeMemory(output.buffer());
      EncodeModules(output.buffer());
      ok = output.Flush();
    }
    if (ok) {
      BlockEncoder blocks(output.buffer(), referenced);
      ok = EncodeAllocations(output, blocks, capture, meter, residency);
      residency_calls = meter.calls();
    }
    ok = ok && EncodeStacks(output, referenced) && tags.Encode(output);
    if (ok) {
      EncodeTotals(output.buffer(), capture.counters, residency);
      EncodeGpuBackings(output.buffer());
      EncodeGpuDevices(output.buffer());
      EncodeHealth(output.buffer(), capture,
                   WriterHistory{g_previous_write_us, g_failed_snapshots, g_last_failure});
      ok = output.Finish();
    }
    if (ok) tags.MarkReported();
  }
  int saved_errno = errno;
  CloseShimFile(file);
  if (ok && rename(temp_path, path) != 0) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {
    RecordFailure("cannot write snapshot %s: %s", path,
                  ArenaExhausted() ? "shim memory cap reached" : strerror(saved_errno));
    unlink(temp_path);
    return false;
  }
  g_previous_write_us = PreciseMicrosSinceStart() - started_us;
  // RETAIN_KEEP / RETAIN_KEEP_BYTES: the oldest of this process's
  // snapshots past the bound go now.
  struct stat written;
  g_previous_bytes = stat(path, &written) == 0 ? static_cast<uint64_t>(written.st_size) : 0;
  KeepSnapshot(sequence, g_previous_bytes);
  LogDiagnostic("wrote %s in %lu us (residency: %lu system calls)", path,
                static_cast<unsigned long>(g_previous_write_us),
                static_cast<unsigned long>(residency_calls));
  if (path_out != nullptr && path_size > 0) snprintf(path_out, path_size, "%s", path);
  return true;
}

// With g_write_mutex held.
WriteOutcome WriteHeld(Trigger trigger, const char* label, uint64_t requests_at_trigger,
                       char* path_out, size_t path_size) {
  // The periodic kinds end with the exit snapshot (writer.h).
  if (g_exit_taken && (trigger == Trigger::kInterval || trigger == Trigger::kEveryNRequests)) {
    return WriteOutcome::kSuperseded;
  }
  if (trigger == Trigger::kExit) g_exit_taken = true;
  if (trigger == Trigger::kEveryNRequests) {
    if (requests_at_trigger <= g_newest_every_n) return WriteOutcome::kSuperseded;
    g_newest_every_n = requests_at_trigger;
  }
  return WriteLocked(trigger, label, requests_at_trigger, path_out, path_size)
             ? WriteOutcome::kWritten
             : WriteOutcome::kFailed;
}

}  // namespace

bool WriteSnapshot(Trigger trigger, const char* label, char* path_out, size_t path_size) {
  return WriteSnapshotAt(trigger, label, ClosedTagCount(), path_out, path_size);
}

bool WriteSnapshotAt(Trigger trigger, const char* label, uint64_t requests_at_trigger,
                     char* path_out, size_t path_size) {
  if (!RealFunctionsReady()) return false;
  BusyScope busy;
  int saved = errno;
  pthread_mutex_lock(&g_write_mutex);
  WriteOutcome outcome = WriteHeld(trigger, label, requests_at_trigger, path_out, path_size);
  pthread_mutex_unlock(&g_write_mutex);
  errno = saved;
  return outcome == WriteOutcome::kWritten;
}

WriteOutcome TryWriteSnapshot(Trigger trigger, const char* label, uint64_t requests_at_trigger) {
  if (!RealFunctionsReady()) return WriteOutcome::kFailed;
  BusyScope busy;
  int saved = errno;
  if (pthread_mutex_trylock(&g_write_mutex) != 0) {
    errno = saved;
    return WriteOutcome::kBusy;
  }
  WriteOutcome outcome = WriteHeld(trigger, label, requests_at_trigger, nullptr, 0);
  pthread_mutex_unlock(&g_write_mutex);
  errno = saved;
  return outcome;
}

void SnapshotWriterLockForFork() { pthread_mutex_lock(&g_write_mutex); }
void SnapshotWriterUnlockForFork() { pthread_mutex_unlock(&g_write_mutex); }
void SnapshotWriterResetInChild() {
  pthread_mutex_init(&g_write_mutex, nullptr);
  g_sequence = 0;
  g_newest_every_n = 0;
  g_exit_taken = false;
  RetentionResetInChild();
}

}  // namespace retain::shim
