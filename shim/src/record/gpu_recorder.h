// gpu_recorder: GPU allocations (HIP, CUDA, Vulkan, Metal) in the same live set as
// the host's, each with its stack, request tag, birth sequence and kind.
//
// Every GPU hook has one shape:
//
//   GpuCall call;                       // before the real call
//   result = real(...);                 // host allocations made inside are
//                                       // Kind::kGpuDriverHost (counted once)
//   if (call.records() && result == success) RecordGpuAlloc(...);
//
// and for a release, TakeGpuRecord() before the real call (so another thread
// cannot be handed the same pointer before its record is gone), then
// CompleteGpuFree() when it succeeded or RestoreGpuRecord() when it failed.
//
// GpuCall is the thread's depth guard: runtimes call their own exports
// (hipHostAlloc reaches hipHostMalloc, vkAllocateMemory may pass through
// other layers), and only the outermost intercepted call records.
//
// Each API keeps its own table, keyed by the device pointer or opaque handle
// the API returns, so a VkDeviceMemory handle can never collide with a HIP
// device pointer.
#ifndef RETAIN_SHIM_SRC_GPU_GPU_RECORDER_H_
#define RETAIN_SHIM_SRC_GPU_GPU_RECORDER_H_

#include <cstdint>

#include "base/thread_state.h"
#include "record/gpu_backing.h"
#include "record/kinds.h"
#include "record/live_table.h"

namespace retain::shim {

// kMetal is recorded only by the Darwin build (hooks/darwin/metal_swizzle.mm); on
// Linux its table exists and stays empty.
enum class GpuApi : uint8_t { kHip = 0, kCuda = 1, kVulkan = 2, kMetal = 3 };
inline constexpr int kGpuApiCount = 4;

// The live records of one API.
LiveTable& GpuTable(GpuApi api);

// Guards one intercepted GPU API call (allocation or release).
class GpuCall {
 public:
  GpuCall() : outermost_(g_thread.gpu_depth++ == 0 && g_thread.busy == 0) {
    if (outermost_) BeginGpuHostNotes();
  }
  ~GpuCall() { --g_thread.gpu_depth; }
  GpuCall(const GpuCall&) = delete;
  GpuCall& operator=(const GpuCall&) = delete;

  // True for the outermost GPU call on this thread, made by the program
  // (not by the shim itself): the one that records.
  bool records() const { return outermost_; }

 private:
  bool outermost_;
};

// Records a successful allocation of `size` bytes under `handle` (device
// pointer or opaque handle, never 0) on `device` (its id in
// record/gpu_devices.h; 0: not known). Captures the stack, thread, time and
// request tag like a heap record, and links the host blocks the driver took
// inside the call when they back it (record/gpu_backing.h). Preserves errno.
void RecordGpuAlloc(GpuApi api, uintptr_t handle, uint64_t size, Kind kind, uint16_t flags,
                    uint8_t device = 0);

// Removes the record of `handle`, copying it to *out for RestoreGpuRecord.
// Returns false (and counts an unknown free) when there is none.
bool TakeGpuRecord(GpuApi api, uintptr_t handle, LiveRecord* out);
// After TakeGpuRecord: the real release succeeded (count it freed) or
// failed (put the record back).
void CompleteGpuFree(GpuApi api, const LiveRecord& record);
void RestoreGpuRecord(GpuApi api, const LiveRecord& record);

// Removes the record of `handle` if there is one and counts it freed;
// returns false, counting nothing, when there is none. For releases that
// cannot fail and cannot tell whether the object was ever recorded: Metal's
// swizzled dealloc sees heap-backed buffers too (never recorded: the heap
// was), and runs once per swizzled class in a hierarchy.
bool RemoveGpuRecordIfAny(GpuApi api, uintptr_t handle);

// Releases the shim never saw allocated.
uint64_t UnknownGpuFrees();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_GPU_RECORDER_H_
