// vulkan_manifest: see gpu/vulkan_manifest.h.
#include "gpu/vulkan_manifest.h"

#define VK_NO_PROTOTYPES
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vulkan/vulkan_core.h>

#include <atomic>
#include <cstdint>

#include "base/config.h"
#include "base/files.h"
#include "base/init_state.h"
#include "base/large_static.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/real_dlsym.h"
#include "base/thread_state.h"
#include "gpu/runtime_lookup.h"
#include "gpu/vulkan_dispatch.h"

namespace retain::shim {
namespace {

std::atomic<bool> g_layer_active;

// A bounded string builder over a caller's buffer; `ok` turns false (and
// stays false) once something did not fit.
struct Builder {
  char* data;
  size_t size;
  size_t length;
  bool ok;

  void Char(char c) {
    if (length + 1 >= size) {
      ok = false;
      return;
    }
    data[length++] = c;
    data[length] = '\0';
  }
  void Text(const char* text) {
    for (; *text != '\0'; ++text) Char(*text);
  }
  // `text` as the inside of a JSON string.
  void JsonEscaped(const char* text) {
    static const char kHex[] = "0123456789abcdef";
    for (const unsigned char* p = reinterpret_cast<const unsigned char*>(text); *p != 0; ++p) {
      if (*p == '"' || *p == '\\') {
        Char('\\');
        Char(static_cast<char>(*p));
      } else if (*p < 0x20) {
        Text("\\u00");
        Char(kHex[*p >> 4]);
        Char(kHex[*p & 15]);
      } else {
        Char(static_cast<char>(*p));
      }
    }
  }
};

uint64_t HashPath(const char* text) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (; *text != '\0'; ++text) {
    hash ^= static_cast<unsigned char>(*text);
    hash *= 1099511628211ull;
  }
  return hash;
}

bool RealPathOfShim(char* out) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&InstallVulkanLayer), &info) == 0 ||
      info.dli_fname == nullptr || info.dli_fname[0] == '\0') {
    return false;
  }
  return realpath(info.dli_fname, out) != nullptr;
}

// Creates `path` (mode 0700) if missing; true when it is a directory (not a
// link) owned by this user that no one else may write to.
bool EnsurePrivateDir(const char* path) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return false;
  struct stat st;
  if (lstat(path, &st) != 0) return false;
  return S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 022) == 0;
}

bool IsOwnDirectory(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

// The manifest directory for `library_path`, created; false (and `why`
// says so) when no private directory can be had.
bool PrepareManifestDir(const char* library_path, char* dir, size_t size, const char** why) {
  char base[PATH_MAX];
  const char* runtime = getenv("XDG_RUNTIME_DIR");
  int n;
  if (runtime != nullptr && runtime[0] == '/' && IsOwnDirectory(runtime)) {
    n = snprintf(base, sizeof(base), "%s/retain-vulkan", runtime);
  } else {
    const char* tmp = getenv("TMPDIR");
    if (tmp == nullptr || tmp[0] != '/') tmp = "/tmp";
    n = snprintf(base, sizeof(base), "%s/retain-vulkan-%u", tmp, static_cast<unsigned>(geteuid()));
  }
  *why = "its directory path is too long";
  if (n < 0 || static_cast<size_t>(n) >= sizeof(base)) return false;
  *why = "is not a private directory (mode 0700, owned by this user)";
  if (!EnsurePrivateDir(base)) {
    snprintf(dir, size, "%s", base);
    return false;
  }
  n = snprintf(dir, size, "%s/%016llx", base,
               static_cast<unsigned long long>(HashPath(library_path)));
  *why = "its directory path is too long";
  if (n < 0 || static_cast<size_t>(n) >= size) return false;
  *why = "is not a private directory (mode 0700, owned by this user)";
  return EnsurePrivateDir(dir);
}

// Writes `text` as `dir`/<layer>.json unless it already holds exactly that:
// to a unique temporary name first (not ending in .json, so a loader
// scanning the directory meanwhile ignores it), then renamed over.
bool WriteManifest(const char* dir, const char* text, size_t length, char* path, size_t path_size) {
  int n = snprintf(path, path_size, "%s/%s.json", dir, kVulkanLayerName);
  if (n < 0 || static_cast<size_t>(n) >= path_size) return false;
  char existing[4096];
  ssize_t got = ReadSmallFile(path, existing, sizeof(existing));
  if (got >= 0 && static_cast<size_t>(got) == length && memcmp(existing, text, length) == 0) {
    return true;
  }
  char temporary[PATH_MAX];
  n = snprintf(temporary, sizeof(temporary), "%s/.%s.%u.%u.tmp", dir, kVulkanLayerName, Pid(),
               CurrentThreadId());
  if (n < 0 || static_cast<size_t>(n) >= sizeof(temporary)) return false;
  unlink(temporary);  // a leftover of a process with our pid that died mid-write
  int file = OpenShimFile(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  if (file < 0) return false;
  bool written = WriteAllToShimFile(file, text, length);
  CloseShimFile(file);
  if (!written || rename(temporary, path) != 0) {
    unlink(temporary);
    return false;
  }
  return true;
}

// Adds `item` to list variable `name`; false when the value got too long.
bool AddToVariable(const char* name, const char* item, char separator) {
  RETAIN_LARGE_STATIC static char value[8192];  // setenv copies it
  int changed = AppendListItem(getenv(name), item, separator, value, sizeof(value));
  if (changed < 0) return false;
  if (changed > 0) setenv(name, value, 1);
  return true;
}

void VulkanForkPrepare() { VulkanDispatchLockForFork(); }
void VulkanForkParent() { VulkanDispatchUnlockForFork(); }
void VulkanForkChild() { VulkanDispatchResetInChild(); }

}  // namespace

bool VulkanLayerActive() { return g_layer_active.load(std::memory_order_acquire); }

size_t FormatVulkanManifest(const char* library_path, char* buffer, size_t size) {
  if (size == 0) return 0;
  buffer[0] = '\0';
  Builder out{buffer, size, 0, true};
  char version[64];
  snprintf(version, sizeof(version), "%u.%u.%u", VK_API_VERSION_MAJOR(VK_HEADER_VERSION_COMPLETE),
           VK_API_VERSION_MINOR(VK_HEADER_VERSION_COMPLETE),
           VK_API_VERSION_PATCH(VK_HEADER_VERSION_COMPLETE));
  out.Text("{\n  \"file_format_version\": \"1.1.2\",\n  \"layer\": {\n    \"name\": \"");
  out.Text(kVulkanLayerName);
  out.Text("\",\n    \"type\": \"GLOBAL\",\n    \"library_path\": \"");
  out.JsonEscaped(library_path);
  out.Text("\",\n    \"api_version\": \"");
  out.Text(version);
  out.Text(
      "\",\n    \"implementation_version\": \"1\",\n"
      "    \"description\": \"retain: records Vulkan device memory allocations (libretain.so)\"\n"
      "  }\n}\n");
  return out.ok ? out.length : 0;
}

int AppendListItem(const char* existing, const char* item, char separator, char* out, size_t size) {
  size_t item_length = strlen(item);
  if (existing == nullptr) existing = "";
  for (const char* p = existing;;) {
    const char* end = strchr(p, separator);
    size_t length = end != nullptr ? static_cast<size_t>(end - p) : strlen(p);
    if (length == item_length && memcmp(p, item, length) == 0) return 0;
    if (end == nullptr) break;
    p = end + 1;
  }
  size_t existing_length = strlen(existing);
  bool need_separator = existing_length > 0 && existing[existing_length - 1] != separator;
  size_t total = existing_length + (need_separator ? 1 : 0) + item_length;
  if (total + 1 > size) return -1;
  memcpy(out, existing, existing_length);
  size_t at = existing_length;
  if (need_separator) out[at++] = separator;
  memcpy(out + at, item, item_length);
  out[total] = '\0';
  return 1;
}

void InstallVulkanLayer() {
  // (A copy that is not the process's never gets here: its constructor
  // leaves it inert, so its layer refuses to negotiate.)
  if (!GetConfig().vulkan) return;
  g_layer_active.store(true, std::memory_order_release);
  pthread_atfork(VulkanForkPrepare, VulkanForkParent, VulkanForkChild);

  // The four strings one after the other in one buffer, each as long as it
  // is: ~1 KiB of it is written, one page of memory rather than one per
  // string (a short-lived process pays for each page it touches).
  constexpr size_t kManifestSize = PATH_MAX * 2 + 1024;
  RETAIN_LARGE_STATIC static char storage[PATH_MAX + kManifestSize + PATH_MAX * 2];
  char* const library = storage;
  if (!RealPathOfShim(library)) {  // needs PATH_MAX
    LogConfigError("cannot find the path of libretain.so; Vulkan allocations are not recorded");
    return;
  }
  char* const manifest = library + strlen(library) + 1;
  size_t length = FormatVulkanManifest(library, manifest, kManifestSize);
  const char* why = nullptr;
  if (length == 0) {
    LogConfigError("the path of libretain.so is too long for a Vulkan layer manifest");
    return;
  }
  char* const dir = manifest + length + 1;
  if (!PrepareManifestDir(library, dir, PATH_MAX, &why)) {
    LogConfigError("Vulkan layer directory %s %s; Vulkan allocations are not recorded", dir, why);
    return;
  }
  char* const path = dir + strlen(dir) + 1;
  if (!WriteManifest(dir, manifest, length, path, PATH_MAX)) {
    LogConfigError(
        "cannot write the Vulkan layer manifest in %s (%s); Vulkan allocations are not"
        " recorded",
        dir, strerror(errno));
    return;
  }
  // The loader ignores VK_ADD_LAYER_PATH when VK_LAYER_PATH is set, even
  // set empty (then no explicit layer is found at all but ours).
  const char* variable = getenv("VK_LAYER_PATH") != nullptr ? "VK_LAYER_PATH" : "VK_ADD_LAYER_PATH";
  if (!AddToVariable(variable, dir, ':') ||
      !AddToVariable("VK_LOADER_LAYERS_ENABLE", kVulkanLayerName, ',')) {
    LogConfigError(
        "%s or VK_LOADER_LAYERS_ENABLE is too long to add the Vulkan layer; Vulkan"
        " allocations are not recorded",
        variable);
    return;
  }
  LogDiagnostic("Vulkan layer %s: manifest %s", kVulkanLayerName, path);
}

}  // namespace retain::shim
