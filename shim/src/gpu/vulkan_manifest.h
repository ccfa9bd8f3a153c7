// vulkan_manifest: makes the Vulkan loader load libretain.so as a layer.
//
// The shim's constructor calls InstallVulkanLayer(): it writes a layer
// manifest (JSON naming the layer VK_LAYER_RETAIN_memory and pointing at the
// real absolute path of this libretain.so) into a directory of the shim's
// own, then adds that directory to VK_ADD_LAYER_PATH (or to VK_LAYER_PATH
// when the user set that one: the loader then ignores VK_ADD_LAYER_PATH) and
// the layer's name to VK_LOADER_LAYERS_ENABLE, appending to values already
// there. The loader (1.3.234 and later) reads both when the program creates
// an instance; it then dlopen()s the library path, which is this very copy,
// already loaded, and calls vkNegotiateLoaderLayerInterfaceVersion
// (gpu/vulkan_hooks.cc).
//
// The directory: $XDG_RUNTIME_DIR/retain-vulkan/<hash>, else
// ${TMPDIR:-/tmp}/retain-vulkan-<uid>/<hash>, where <hash> is a hash of the
// library path (two builds of the shim never share a manifest). Each level
// is created mode 0700 and must be a real directory owned by this user,
// without group or other write permission, or nothing is installed (another
// user could otherwise plant a manifest naming their library). The manifest
// is written to a unique temporary name and renamed into place, and only
// when its content differs from what is there, so concurrent processes and
// children that inherit the environment (the names are then already in the
// variables and are not added twice) never see a partial file.
//
// Runs once, in the constructor, single-threaded, with the re-entry guard
// held (setenv and realpath may malloc). Never fails the host: on any
// problem it warns once and the layer stays off.
#ifndef RETAIN_SHIM_SRC_GPU_VULKAN_MANIFEST_H_
#define RETAIN_SHIM_SRC_GPU_VULKAN_MANIFEST_H_

#include <cstddef>

namespace retain::shim {

inline constexpr char kVulkanLayerName[] = "VK_LAYER_RETAIN_memory";

// Writes the manifest and sets the environment, unless RETAIN_VULKAN=off or
// this copy of libretain.so is not the process's (not in the global scope:
// it was dlopen()ed, e.g. by the loader in a child that inherited the
// variables but not LD_PRELOAD; such a copy pins itself, RTLD_NODELETE, so
// the loader's dlclose cannot unmap the handlers its start registered).
void InstallVulkanLayer();

// True when this copy of the shim may act as the layer: the shim started,
// RETAIN_VULKAN is not off, and this copy is the process's (see above).
// Set by InstallVulkanLayer().
bool VulkanLayerActive();

// The manifest text for `library_path` (JSON-escaped) into `buffer`.
// Returns its length, or 0 when it does not fit. Exposed for tests.
size_t FormatVulkanManifest(const char* library_path, char* buffer, size_t size);

// The value of a list variable (`separator`-separated, e.g. ':' for paths,
// ',' for layer names) with `item` appended, unless `item` already is one of
// its elements. `existing` may be null or empty. Returns 1 and writes the
// new value to `out` when it changed, 0 when `item` was already there, -1
// when the new value does not fit in `size`. Exposed for tests.
int AppendListItem(const char* existing, const char* item, char separator, char* out, size_t size);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_VULKAN_MANIFEST_H_
