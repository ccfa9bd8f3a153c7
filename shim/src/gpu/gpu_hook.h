// gpu_hook: what the HIP and CUDA hooks share around a release call.
//
// Header-only, for the hook files (it needs the hooks' HookReady), not for
// the recorder core.
#ifndef RETAIN_SHIM_SRC_GPU_GPU_HOOK_H_
#define RETAIN_SHIM_SRC_GPU_GPU_HOOK_H_

#include <errno.h>

#include <cstdint>

#include "record/gpu_recorder.h"
#include "record/hook_shape.h"

namespace retain::shim {

// Runs `real` (a release of `handle`, returning 0 on success as every GPU
// API does) inside a GpuCall. The record is taken out before the call
// (another thread may be handed the same address the moment it returns),
// then counted freed when the call succeeded or put back when it failed.
// Only the thread's outermost GPU call records. Returns what `real`
// returned, with the errno it left.
template <typename Call>
auto ReleaseGpu(GpuApi api, uintptr_t handle, Call real) -> decltype(real()) {
  GpuCall call;
  if (!call.records() || handle == 0 || !HookReady()) return real();
  int saved = errno;
  LiveRecord record;
  bool had_record;
  {
    BusyScope busy;
    had_record = TakeGpuRecord(api, handle, &record);
  }
  errno = saved;
  const auto result = real();
  if (had_record) {
    saved = errno;
    BusyScope busy;
    if (result == 0) {
      CompleteGpuFree(api, record);
    } else {
      RestoreGpuRecord(api, record);
    }
    errno = saved;
  }
  return result;
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_GPU_HOOK_H_
