// gpu_recorder: see record/gpu_recorder.h.
#include "record/gpu_recorder.h"

#include <errno.h>

#include <atomic>

#include "base/large_static.h"
#include "record/birth_sequence.h"
#include "record/recorder.h"

namespace retain::shim {
namespace {

// constinit, zero-filled: see LiveTable.
RETAIN_LARGE_STATIC constinit LiveTable g_tables[kGpuApiCount];
std::atomic<uint64_t> g_unknown_gpu_frees;

}  // namespace

LiveTable& GpuTable(GpuApi api) { return g_tables[static_cast<int>(api)]; }

void RecordGpuAlloc(GpuApi api, uintptr_t handle, uint64_t size, Kind kind, uint16_t flags,
                    uint8_t device) {
  if (handle == 0) return;
  int saved = errno;
  BusyScope busy;  // stack capture and the tables may allocate through hooks
  LiveRecord record = NewRecord(handle, size, kind);
  record.flags = flags;
  record.device = device & 0x3f;
  GpuTable(api).Insert(record, Births());
  LinkGpuBacking(static_cast<uint8_t>(api), kind, handle, size);
  errno = saved;
}

bool TakeGpuRecord(GpuApi api, uintptr_t handle, LiveRecord* out) {
  if (handle != 0 && GpuTable(api).Take(handle, out)) return true;
  if (handle != 0) g_unknown_gpu_frees.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void CompleteGpuFree(GpuApi api, const LiveRecord& record) {
  GpuTable(api).CountFreed(record);
  UnlinkGpuBacking(static_cast<uint8_t>(api), record.address);
}
void RestoreGpuRecord(GpuApi api, const LiveRecord& record) { GpuTable(api).Restore(record); }

bool RemoveGpuRecordIfAny(GpuApi api, uintptr_t handle) {
  if (handle == 0 || !GpuTable(api).Remove(handle)) return false;
  UnlinkGpuBacking(static_cast<uint8_t>(api), handle);
  return true;
}

uint64_t UnknownGpuFrees() { return g_unknown_gpu_frees.load(std::memory_order_relaxed); }

}  // namespace retain::shim
