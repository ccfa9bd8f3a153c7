// malloc_provider: see record/malloc_provider.h.
#include "record/malloc_provider.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include <cstdint>

#include "base/log.h"
#include "base/process_info.h"
#include "base/real_dlsym.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

char g_foreign_malloc_path[512];

using MallocFn = void* (*)(size_t);
using FreeFn = void (*)(void*);

// The objects loaded before libretain.so (the executable excluded), in the
// loader's order: where a malloc ahead of the shim's is defined.
constexpr int kMaxAhead = 32;
struct Ahead {
  const char* shim;  // libretain.so's name as the loader lists it
  const char* names[kMaxAhead];
  int count;
};

int CollectAhead(dl_phdr_info* info, size_t, void* data) {
  auto* ahead = static_cast<Ahead*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  if (strcmp(info->dlpi_name, ahead->shim) == 0) return 1;  // the shim: the rest come after it
  if (ahead->count < kMaxAhead) ahead->names[ahead->count++] = info->dlpi_name;
  return 0;
}

// The object whose own malloc the process's calls reach: the first one ahead
// of the shim that defines it, else the executable. (dlsym(RTLD_DEFAULT)
// alone can answer with the executable's PLT entry for malloc, the address
// the program uses for it, wherever it is defined.)
const char* ForeignMallocOwner() {
  Dl_info shim{};
  if (dladdr(reinterpret_cast<void*>(&CheckMallocProvider), &shim) == 0) return ExePath();
  Ahead ahead{};
  ahead.shim = shim.dli_fname;
  dl_iterate_phdr(CollectAhead, &ahead);
  for (int i = 0; i < ahead.count; ++i) {
    void* handle = dlopen(ahead.names[i], RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    const void* found = ShimDlsym(handle, "malloc");
    Dl_info info{};
    const bool defines = found != nullptr && dladdr(found, &info) != 0 &&
                         info.dli_fname != nullptr && strcmp(info.dli_fname, ahead.names[i]) == 0;
    dlclose(handle);
    if (defines) return ahead.names[i];
  }
  return ExePath();
}

}  // namespace

void CheckMallocProvider() {
  // Calls malloc as the program does (the address the loader gives the
  // program for it) and sees whether the shim's hook ran: the caller is
  // inside the shim (busy), so the hook passes it through and marks the probe.
  const auto program_malloc = reinterpret_cast<MallocFn>(ShimDlsym(RTLD_DEFAULT, "malloc"));
  const auto program_free = reinterpret_cast<FreeFn>(ShimDlsym(RTLD_DEFAULT, "free"));
  if (program_malloc == nullptr || program_free == nullptr) return;
  bool ours;
  {
    BusyScope busy;
    g_thread.malloc_probe = 1;
    void* volatile block = program_malloc(1);
    ours = g_thread.malloc_probe == 2;
    g_thread.malloc_probe = 0;
    program_free(block);
  }
  if (ours) return;
  strncpy(g_foreign_malloc_path, ForeignMallocOwner(), sizeof(g_foreign_malloc_path) - 1);
  if (strcmp(g_foreign_malloc_path, ExePath()) == 0) {
    // The program's own (rustc links jemalloc in): no order of LD_PRELOAD
    // changes that, and a build would get the line from every such process
    // on its stderr. The snapshots say it (retain-diff warns), and RETAIN_LOG.
    LogWarning(
        "malloc here is the program's own (%s): heap allocations are not recorded (mappings "
        "and GPU memory are)",
        g_foreign_malloc_path);
    return;
  }
  LogConfigError(
      "malloc here is %s's, which the dynamic linker searches before libretain.so: heap "
      "allocations are not recorded (mappings and GPU memory are). Put libretain.so first in "
      "LD_PRELOAD (retain-run does)",
      g_foreign_malloc_path);
}

const char* ForeignMallocPath() { return g_foreign_malloc_path; }

}  // namespace retain::shim
