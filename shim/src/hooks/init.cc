// init: the shim's start (InitializeShim, the constructor), its end
// (the exit snapshot) and its fork handlers.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include "base/arena.h"
#include "base/config.h"
#include "base/hook_table.h"
#include "base/init_state.h"
#include "base/log.h"
#include "base/own_fds.h"
#include "base/process_info.h"
#include "base/real_dlsym.h"
#include "base/spin_lock.h"
#include "base/syscall_filter.h"
#include "base/thread_state.h"
#include "base/threads.h"
#include "gpu/runtime_lookup.h"
#include "gpu/vulkan_manifest.h"
#include "net/control_server.h"
#include "net/front_door.h"
#include "record/gpu_devices.h"
#include "record/gpu_recorder.h"
#include "record/live_tables.h"
#include "record/malloc_provider.h"
#include "record/recorder.h"
#include "record/sampler.h"
#include "record/tag_table.h"
#include "snapshot/signal_chain.h"
#include "snapshot/triggers.h"
#include "snapshot/trim.h"
#include "snapshot/writer.h"
#include "unwind/go_runtime.h"
#include "unwind/module_table.h"
#include "unwind/stack_capture.h"
#include "unwind/stack_table.h"

namespace retain::shim {

std::atomic<bool> g_shim_ready;

namespace {

SpinLock g_init_lock;
bool g_config_loaded;  // guarded by g_init_lock

// fork() handlers. Prepare takes every lock of the shim, in the order the
// shim itself nests them, so no other thread is mid-update when the child's
// copy of memory is made; the child then resets the locks (their holder, this
// thread, is the only one that exists there) and keeps recording.
void ForkPrepare() {
  ++g_thread.busy;
  // First, before any of the shim's locks: a thread inside libunwind may
  // need one to finish (stack_capture.h).
  UnwinderLockForFork();
  SnapshotWriterLockForFork();
  ModuleTableLockForFork();
  ProgramMappings().Lock();
  StackTableLockForFork();
  ForEachLiveTable([](LiveTable& table) { table.LockAll(); });
  TagTableLockForFork();  // held while it takes arena memory
  ArenaLockForFork();
  ShimFdsLockForFork();
}

void ForkParent() {
  ShimFdsUnlockForFork();
  ArenaUnlockForFork();
  TagTableUnlockForFork();
  ForEachLiveTableReversed([](LiveTable& table) { table.UnlockAll(); });
  StackTableUnlockForFork();
  ProgramMappings().Unlock();
  ModuleTableUnlockForFork();
  SnapshotWriterUnlockForFork();
  UnwinderUnlockForFork();
  --g_thread.busy;
}

void ForkChild() {
  // First: everything below may read a file (ReadSmallFile takes its lock).
  // The control endpoint is the parent's: the child closes its copies of
  // the listener and connections, and has none of its own.
  ShimFdsResetInChild();
  UnwinderResetInChild();
  ArenaResetInChild();
  TagTableResetInChild();
  HeapTable().ResetLocksInChild();
  HeapNurseriesAfterForkInChild();
  for (int i = 0; i < kGpuApiCount; ++i) {
    // The child has none of the parent's device memory (nor its GPU
    // contexts): its GPU records start empty.
    GpuTable(static_cast<GpuApi>(i)).ResetLocksInChild();
    GpuTable(static_cast<GpuApi>(i)).DiscardInChild();
  }
  StackTableResetInChild();
  ProgramMappings().ResetLockInChild();
  ModuleTableResetInChild();
  SnapshotWriterResetInChild();
  TrimResetInChild();
  GpuBackingResetInChild();
  GpuDevicesResetInChild();
  g_thread.tid = 0;
  ShimThreadsResetInChild();  // one thread: the program's, until it starts more
  ResetProcessInfoInChild();
  SnapshotTriggersResetInChild();
  SignalChainResetInChild();
  ControlServerResetInChild();
  FrontDoorResetInChild();
  --g_thread.busy;
}

bool g_inert;  // see ThisCopyIsTheProcessShim

// Keeps errno as it was across the constructor: the program's main() must
// not find the EEXIST of the shim's mkdir, or anything else of the shim's.
class ErrnoKeeper {
 public:
  ErrnoKeeper() : saved_(errno) {}
  ~ErrnoKeeper() { errno = saved_; }
  ErrnoKeeper(const ErrnoKeeper&) = delete;
  ErrnoKeeper& operator=(const ErrnoKeeper&) = delete;

 private:
  int saved_;
};

__attribute__((constructor)) void ShimConstructor() {
  ErrnoKeeper errno_keeper;
  BusyScope busy;  // the shim's own start-up allocations are not the host's
  if (!ThisCopyIsTheProcessShim()) {
    g_inert = true;
    return;
  }
  if (!InitializeShim()) return;
  CheckMallocProvider();
  if (!LoadUnwinder() && GetConfig().unwind == UnwindMode::kLibunwind) {
    LogConfigError(
        "RETAIN_UNWIND=libunwind: cannot load libunwind.so.8; stacks come from frame"
        " pointers only");
  }
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
  StartHeapNurseries();
  InstallSnapshotTriggers();
  InstallVulkanLayer();  // before main: the loader reads the environment later
  StartControlServer();
  StartFrontDoor();
  char unresolved[512];
  UnresolvedHooks(unresolved, sizeof(unresolved));
  if (unresolved[0] != '\0') {
    LogWarning("cannot find the real %s; calls to them are not recorded", unresolved);
  }
  LogDiagnostic("started in pid %u (%s): %d hooks resolved, snapshots to %s", Pid(), ExePath(),
                kHookCount, GetConfig().dir);
  FinishConfigReport();  // after the last configuration error of the start
}

__attribute__((destructor)) void ShimDestructor() {
  if (g_inert || !ShimReady()) return;
  StopControlServer();  // its socket file goes first: the exit snapshot may take a while
  StopFrontDoor();
  WriteExitSnapshot();
}

}  // namespace

bool InitializeShim() {
  if (ShimReady()) return true;
  if (g_thread.resolving) return false;
  if (!ResolveRealFunctions()) return false;
  // Called again from a hook while this thread initialises (dlsym reporting
  // a missing symbol mallocs): the real functions are known and the thread
  // is busy, so the hook passes the call through.
  if (g_thread.initializing) return true;
  SpinLockHolder hold(g_init_lock);
  if (!g_config_loaded) {
    g_config_loaded = true;
    g_thread.initializing = 1;
    ++g_thread.busy;
    LoadConfig(MutableConfig());
    SetArenaCap(GetConfig().max_memory);
    if (!ConfigureSampler(GetConfig().sample_interval, GetConfig().sample_seed)) {
      LogWarning("cannot set up RETAIN_SAMPLE's filter; recording every allocation");
    }
    InitProcessInfo();
    CheckSyscallFilter();  // one inherited from the service manager or the parent
    DetectGoProgram();
    RefreshModules();  // the shim's own code range, for dropping its frames
    LoadEarlyUnwinder();
    --g_thread.busy;
    g_thread.initializing = 0;
    g_shim_ready.store(true, std::memory_order_release);
  }
  return true;
}

}  // namespace retain::shim
