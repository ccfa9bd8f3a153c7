// real_dlsym: see base/real_dlsym.h.
#include "base/real_dlsym.h"

#include <dlfcn.h>

#include <atomic>

#include "base/thread_state.h"

namespace retain::shim {
namespace {

constinit std::atomic<DlsymFn> g_real_dlsym{nullptr};

}  // namespace

DlsymFn RealDlsym() {
  DlsymFn fn = g_real_dlsym.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // dlvsym may allocate (its error state): those calls are served by the
  // bootstrap allocator while `resolving` is set.
  ++g_thread.resolving;
  void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  --g_thread.resolving;
  fn = reinterpret_cast<DlsymFn>(found);
  if (fn != nullptr) g_real_dlsym.store(fn, std::memory_order_release);
  return fn;
}

void* ShimDlsym(void* handle, const char* name) {
  DlsymFn fn = RealDlsym();
  return fn != nullptr ? fn(handle, name) : nullptr;
}

}  // namespace retain::shim
