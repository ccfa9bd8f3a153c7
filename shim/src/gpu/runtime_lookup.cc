// runtime_lookup: see gpu/runtime_lookup.h.
#include "gpu/runtime_lookup.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include <atomic>

#include "base/real_dlsym.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

// Paths of matching loaded objects, gathered under the loader's lock by
// dl_iterate_phdr and opened after it returns (dlopen inside the callback
// would deadlock on that lock).
struct Matches {
  static constexpr int kMax = 8;
  static constexpr int kPathMax = 512;
  const char* const* prefixes;
  int count;
  char paths[kMax][kPathMax];
};

bool BaseNameMatches(const char* path, const char* const* prefixes) {
  const char* slash = strrchr(path, '/');
  const char* base = slash != nullptr ? slash + 1 : path;
  for (const char* const* p = prefixes; *p != nullptr; ++p) {
    if (strncmp(base, *p, strlen(*p)) == 0) return true;
  }
  return false;
}

int CollectMatch(struct dl_phdr_info* info, size_t, void* data) {
  auto* matches = static_cast<Matches*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  if (!BaseNameMatches(info->dlpi_name, matches->prefixes)) return 0;
  size_t length = strlen(info->dlpi_name);
  if (length >= Matches::kPathMax) return 0;
  memcpy(matches->paths[matches->count], info->dlpi_name, length + 1);
  return ++matches->count == Matches::kMax ? 1 : 0;
}

char g_self_marker;

}  // namespace

std::atomic<uint32_t> g_runtime_generation;

uint32_t RuntimeGeneration() { return g_runtime_generation.load(std::memory_order_acquire); }
void NoteUnload() { g_runtime_generation.fetch_add(1, std::memory_order_acq_rel); }

bool IsInShim(const void* address) {
  Dl_info self;
  Dl_info other;
  if (dladdr(&g_self_marker, &self) == 0 || dladdr(address, &other) == 0) return false;
  return self.dli_fbase == other.dli_fbase;
}

bool ThisCopyIsTheProcessShim() {
  // The public API's symbol tells (another preloaded allocator may define
  // malloc first; nothing else defines retain_snapshot), looked up in the
  // global scope: the main program's handle, not RTLD_DEFAULT, which from
  // code in a library opened RTLD_LOCAL also searches that library itself.
  void* program = dlopen(nullptr, RTLD_NOW);
  if (program == nullptr) return false;
  void* api = ShimDlsym(program, "retain_snapshot");
  dlclose(program);
  return api != nullptr && IsInShim(api);
}

void* FindRuntimeFunction(const char* const* prefixes, const char* name) {
  BusyScope busy;
  void* fn = ShimDlsym(RTLD_NEXT, name);
  if (fn != nullptr && !IsInShim(fn)) return fn;
  Matches matches;
  matches.prefixes = prefixes;
  matches.count = 0;
  dl_iterate_phdr(CollectMatch, &matches);
  for (int i = 0; i < matches.count; ++i) {
    void* handle = dlopen(matches.paths[i], RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (handle == nullptr) continue;
    fn = ShimDlsym(handle, name);
    dlclose(handle);  // drops the reference RTLD_NOLOAD added; the runtime stays
    if (fn != nullptr && !IsInShim(fn)) return fn;
  }
  return nullptr;
}

}  // namespace retain::shim
