// cuda_impl: see gpu/cuda_impl.h.
#include "gpu/cuda_impl.h"

#include <errno.h>
#include <string.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gpu/cuda_device.h"
#include "gpu/gpu_hook.h"
#include "gpu/runtime_lookup.h"
#include "record/gpu_recorder.h"
#include "record/hook_shape.h"

namespace retain::shim {
namespace {

using namespace cuda;  // NOLINT: the CUDA type names

constexpr const char* kRuntimeLibraries[] = {"libcudart.so", nullptr};
constexpr const char* kDriverLibraries[] = {"libcuda.so", nullptr};

// The real function behind each wrapper slot, set once (before the wrapper
// is handed out) and never changed.
constinit std::atomic<void*> g_targets[kCudaEntryCount][kCudaWrapperSlots];
// The real function behind each exported hook.
constinit std::atomic<void*> g_exported[kCudaEntryCount];
// The runtime generation g_exported was filled in (gpu/runtime_lookup.h).
std::atomic<uint32_t> g_exported_generation;

// kCudaWrapperSlots wrappers per implementation: Call<entry, slot> calls
// the implementation with g_targets[entry][slot] as the real function.
template <auto kImpl>
struct Wrappers;

template <typename R, typename Fn, typename... Args, R (*kImpl)(Fn, Args...)>
struct Wrappers<kImpl> {
  template <int kEntry, int kSlot>
  static R Call(Args... args) {
    auto real = reinterpret_cast<Fn>(g_targets[kEntry][kSlot].load(std::memory_order_acquire));
    return kImpl(real, args...);
  }

  template <int kEntry>
  static void* At(int slot) {
    static_assert(kCudaWrapperSlots == 4);
    switch (slot) {
      case 0:
        return reinterpret_cast<void*>(&Call<kEntry, 0>);
      case 1:
        return reinterpret_cast<void*>(&Call<kEntry, 1>);
      case 2:
        return reinterpret_cast<void*>(&Call<kEntry, 2>);
      default:
        return reinterpret_cast<void*>(&Call<kEntry, 3>);
    }
  }
};

struct EntryInfo {
  CudaEntry entry;
  const char* abi_name;   // the exported name (dlsym, the shim's own export)
  const char* alias;      // another ABI name with the same signature, or nullptr
  const char* proc_name;  // cuGetProcAddress's name; nullptr for the runtime
  int min_version;        // cuGetProcAddress's cudaVersion for this ABI
  void* (*wrapper_at)(int slot);
};

// One row per entry of gpu/cuda_api.h's lists, in CudaEntry order.
constexpr EntryInfo kEntries[] = {
#define RETAIN_CUDART_ENTRY_INFO(entry, name, alias, impl, params, args) \
  {CudaEntry::entry, #name, alias,                                       \
   nullptr,          0,     &Wrappers<&cuda_impl::impl>::At<static_cast<int>(CudaEntry::entry)>},
#define RETAIN_CUDA_DRIVER_ENTRY_INFO(entry, name, alias, proc_name, min_version, impl, params, \
                                      args)                                                     \
  {CudaEntry::entry,                                                                            \
   #name,                                                                                       \
   alias,                                                                                       \
   proc_name,                                                                                   \
   min_version,                                                                                 \
   &Wrappers<&cuda_impl::impl>::At<static_cast<int>(CudaEntry::entry)>},
    RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_CUDART_ENTRY_INFO)
        RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_CUDA_DRIVER_ENTRY_INFO)
#undef RETAIN_CUDART_ENTRY_INFO
#undef RETAIN_CUDA_DRIVER_ENTRY_INFO
};

constexpr bool EntriesInOrder() {
  int i = 0;
  for (const EntryInfo& info : kEntries) {
    if (static_cast<int>(info.entry) != i++) return false;
  }
  return i == kCudaEntryCount;
}
static_assert(EntriesInOrder(), "kEntries must list every CudaEntry, in order");

bool SameName(const char* a, const char* b) { return b != nullptr && strcmp(a, b) == 0; }

// Which device an allocation call's memory is on (gpu/cuda_device.h),
// asked once the call succeeded: the runtime's current device, the current
// context's, or cuMemCreate's location (a callable).
struct RuntimeDevice {
  uint8_t operator()() const { return CudaRuntimeDevice(); }
};
struct ContextDevice {
  uint8_t operator()() const { return CudaContextDevice(); }
};

// The bookkeeping after a successful allocation (outermost call only).
template <typename Device>
void Record(uintptr_t key, uint64_t size, Kind kind, unsigned int flags, Device device) {
  if (key == 0) return;
  int saved = errno;
  if (HookReady()) {
    RecordGpuAlloc(GpuApi::kCuda, key, size, kind, static_cast<uint16_t>(flags & 0xffff), device());
  }
  errno = saved;
}

uintptr_t Key(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }
uintptr_t Key(unsigned long long value) { return static_cast<uintptr_t>(value); }

// An allocation call: `call` runs the real function; on success (0 for
// both APIs) the key it stored in *out is recorded with `size`: the byte
// count, or a callable that computes it once the call has succeeded (the
// pitched calls only know their size from the pitch they return), on the
// device `device()` answers then.
template <typename R, typename Device, typename Out, typename Call, typename Size>
R Allocate(Call call, const Out* out, Size size, Kind kind, unsigned int flags,
           Device device = Device()) {
  GpuCall guard;
  R result = call();
  if (guard.records() && result == 0 && out != nullptr) {
    if constexpr (std::is_invocable_v<Size>) {
      Record(Key(*out), size(), kind, flags, device);
    } else {
      Record(Key(*out), size, kind, flags, device);
    }
  }
  return result;
}

// The bytes of a pitched allocation: *pitch rows of `height`, saturating
// at UINT64_MAX (a size that large cannot have succeeded; the record still
// says "huge" rather than wrapping to a small number). 0 without a pitch.
uint64_t PitchedBytes(const size_t* pitch, size_t height) {
  if (pitch == nullptr) return 0;
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(*pitch), static_cast<uint64_t>(height),
                             &bytes)) {
    return UINT64_MAX;
  }
  return bytes;
}

// A release: see ReleaseGpu.
template <typename R, typename Call>
R Release(Call call, uintptr_t key) {
  return ReleaseGpu(GpuApi::kCuda, key, call);
}

// cuGetProcAddress's result: the entry point's wrapper in place of the real
// pointer, when it is one of ours.
void WrapProc(const char* symbol, void** pfn, int cuda_version) {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  int entry = CudaEntryForProcName(symbol, cuda_version);
  if (entry < 0) return;
  int saved = errno;
  *pfn = WrapCudaTarget(entry, *pfn);
  errno = saved;
}

}  // namespace

int CudaEntryForSymbol(const char* name) {
  if (name == nullptr) return -1;
  for (const EntryInfo& info : kEntries) {
    if (SameName(name, info.abi_name) || SameName(name, info.alias)) {
      return static_cast<int>(info.entry);
    }
  }
  return -1;
}

int CudaEntryForProcName(const char* symbol, int cuda_version) {
  if (symbol == nullptr) return -1;
  // By base name and version first: "cuGetProcAddress" is both a base name
  // (the _v2 ABI from 12000) and the first ABI's exact name.
  int best = -1;
  int best_version = -1;
  for (const EntryInfo& info : kEntries) {
    if (info.proc_name == nullptr || !SameName(symbol, info.proc_name)) continue;
    if (cuda_version >= info.min_version && info.min_version > best_version) {
      best = static_cast<int>(info.entry);
      best_version = info.min_version;
    }
  }
  if (best >= 0) return best;
  for (const EntryInfo& info : kEntries) {
    if (info.proc_name == nullptr) continue;
    if (SameName(symbol, info.abi_name) || SameName(symbol, info.alias)) {
      return static_cast<int>(info.entry);
    }
  }
  return -1;
}

bool IsCudaExportName(const char* name) {
  if (name == nullptr) return false;
  for (const EntryInfo& info : kEntries) {
    if (SameName(name, info.abi_name)) return true;
  }
  return false;
}

void* WrapCudaTarget(int entry, void* real) {
  if (entry < 0 || entry >= kCudaEntryCount || real == nullptr || IsInShim(real)) return real;
  for (int slot = 0; slot < kCudaWrapperSlots; ++slot) {
    void* expected = nullptr;
    if (g_targets[entry][slot].compare_exchange_strong(expected, real, std::memory_order_acq_rel) ||
        expected == real) {
      return kEntries[entry].wrapper_at(slot);
    }
  }
  return real;  // every slot serves another target: this one goes unrecorded
}

void* CudaExportedReal(CudaEntry entry) {
  // After a dlclose, what was found may be gone: look everything up again.
  const uint32_t generation = RuntimeGeneration();
  if (__builtin_expect(generation != g_exported_generation.load(std::memory_order_acquire), 0)) {
    for (std::atomic<void*>& slot : g_exported) slot.store(nullptr, std::memory_order_release);
    g_exported_generation.store(generation, std::memory_order_release);
  }
  const EntryInfo& info = kEntries[static_cast<int>(entry)];
  const char* const* libraries = info.proc_name == nullptr ? kRuntimeLibraries : kDriverLibraries;
  return ResolveRuntimeFunction(g_exported[static_cast<int>(entry)], libraries, info.abi_name);
}

namespace cuda_impl {

cudaError_t Malloc(cudaMalloc_fn real, void** dev_ptr, size_t size) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(dev_ptr, size); }, dev_ptr, size,
                                              Kind::kCudaDevice, 0);
}

cudaError_t Free(cudaFree_fn real, void* dev_ptr) {
  return Release<cudaError_t>([&] { return real(dev_ptr); }, Key(dev_ptr));
}

cudaError_t MallocHost(cudaMallocHost_fn real, void** ptr, size_t size) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(ptr, size); }, ptr, size,
                                              Kind::kCudaHost, 0);
}

cudaError_t HostAlloc(cudaHostAlloc_fn real, void** host, size_t size, unsigned int flags) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(host, size, flags); }, host, size,
                                              Kind::kCudaHost, flags);
}

cudaError_t FreeHost(cudaFreeHost_fn real, void* ptr) {
  return Release<cudaError_t>([&] { return real(ptr); }, Key(ptr));
}

cudaError_t MallocManaged(cudaMallocManaged_fn real, void** dev_ptr, size_t size,
                          unsigned int flags) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(dev_ptr, size, flags); }, dev_ptr,
                                              size, Kind::kCudaManaged, 0);
}

cudaError_t MallocAsync(cudaMallocAsync_fn real, void** dev_ptr, size_t size, cudaStream_t stream) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(dev_ptr, size, stream); }, dev_ptr,
                                              size, Kind::kCudaDevice, 0);
}

cudaError_t FreeAsync(cudaFreeAsync_fn real, void* dev_ptr, cudaStream_t stream) {
  return Release<cudaError_t>([&] { return real(dev_ptr, stream); }, Key(dev_ptr));
}

cudaError_t MallocPitch(cudaMallocPitch_fn real, void** dev_ptr, size_t* pitch, size_t width,
                        size_t height) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(dev_ptr, pitch, width, height); },
                                              dev_ptr, [&] { return PitchedBytes(pitch, height); },
                                              Kind::kCudaDevice, 0);
}

cudaError_t MallocFromPoolAsync(cudaMallocFromPoolAsync_fn real, void** ptr, size_t size,
                                cudaMemPool_t mem_pool, cudaStream_t stream) {
  return Allocate<cudaError_t, RuntimeDevice>([&] { return real(ptr, size, mem_pool, stream); },
                                              ptr, size, Kind::kCudaDevice, 0);
}

CUresult MemAlloc(cuMemAlloc_v2_fn real, CUdeviceptr* dptr, size_t bytesize) {
  return Allocate<CUresult, ContextDevice>([&] { return real(dptr, bytesize); }, dptr, bytesize,
                                           Kind::kCudaDevice, 0);
}

CUresult MemFree(cuMemFree_v2_fn real, CUdeviceptr dptr) {
  return Release<CUresult>([&] { return real(dptr); }, Key(dptr));
}

CUresult MemAllocHost(cuMemAllocHost_v2_fn real, void** pp, size_t bytesize) {
  return Allocate<CUresult, ContextDevice>([&] { return real(pp, bytesize); }, pp, bytesize,
                                           Kind::kCudaHost, 0);
}

CUresult MemHostAlloc(cuMemHostAlloc_fn real, void** pp, size_t bytesize, unsigned int flags) {
  return Allocate<CUresult, ContextDevice>([&] { return real(pp, bytesize, flags); }, pp, bytesize,
                                           Kind::kCudaHost, flags);
}

CUresult MemFreeHost(cuMemFreeHost_fn real, void* p) {
  return Release<CUresult>([&] { return real(p); }, Key(p));
}

CUresult MemAllocManaged(cuMemAllocManaged_fn real, CUdeviceptr* dptr, size_t bytesize,
                         unsigned int flags) {
  return Allocate<CUresult, ContextDevice>([&] { return real(dptr, bytesize, flags); }, dptr,
                                           bytesize, Kind::kCudaManaged, 0);
}

CUresult MemCreate(cuMemCreate_fn real, CUmemGenericAllocationHandle* handle, size_t size,
                   const CUmemAllocationProp* prop, unsigned long long flags) {
  GpuCall guard;
  CUresult result = real(handle, size, prop, flags);
  if (guard.records() && result == kCudaSuccess && handle != nullptr) {
    // The properties say where the memory is (read once the call accepted
    // them): a device, by its ordinal, or the host (CUDA 12.2+: pinned host
    // memory, in the host domain).
    const Kind kind = CudaPropIsHost(prop) ? Kind::kCudaHost : Kind::kCudaDevice;
    Record(Key(*handle), size, kind, 0, [prop] { return CudaPropDevice(prop); });
  }
  return result;
}

CUresult MemRelease(cuMemRelease_fn real, CUmemGenericAllocationHandle handle) {
  return Release<CUresult>([&] { return real(handle); }, Key(handle));
}

CUresult MemMap(cuMemMap_fn real, CUdeviceptr ptr, size_t size, size_t offset,
                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GpuCall guard;  // records nothing: the bytes were counted by cuMemCreate
  return real(ptr, size, offset, handle, flags);
}

CUresult MemUnmap(cuMemUnmap_fn real, CUdeviceptr ptr, size_t size) {
  GpuCall guard;  // records nothing: cuMemRelease ends the record
  return real(ptr, size);
}

CUresult MemAllocAsync(cuMemAllocAsync_fn real, CUdeviceptr* dptr, size_t bytesize,
                       CUstream stream) {
  return Allocate<CUresult, ContextDevice>([&] { return real(dptr, bytesize, stream); }, dptr,
                                           bytesize, Kind::kCudaDevice, 0);
}

CUresult MemFreeAsync(cuMemFreeAsync_fn real, CUdeviceptr dptr, CUstream stream) {
  return Release<CUresult>([&] { return real(dptr, stream); }, Key(dptr));
}

CUresult MemAllocPitch(cuMemAllocPitch_v2_fn real, CUdeviceptr* dptr, size_t* pitch,
                       size_t width_in_bytes, size_t height, unsigned int element_size_bytes) {
  return Allocate<CUresult, ContextDevice>(
      [&] { return real(dptr, pitch, width_in_bytes, height, element_size_bytes); }, dptr,
      [&] { return PitchedBytes(pitch, height); }, Kind::kCudaDevice, 0);
}

CUresult MemAllocFromPoolAsync(cuMemAllocFromPoolAsync_fn real, CUdeviceptr* dptr, size_t bytesize,
                               CUmemoryPool pool, CUstream stream) {
  return Allocate<CUresult, ContextDevice>([&] { return real(dptr, bytesize, pool, stream); }, dptr,
                                           bytesize, Kind::kCudaDevice, 0);
}

CUresult GetProcAddress(cuGetProcAddress_fn real, const char* symbol, void** pfn, int cuda_version,
                        cuuint64_t flags) {
  CUresult result = real(symbol, pfn, cuda_version, flags);
  if (result == kCudaSuccess) WrapProc(symbol, pfn, cuda_version);
  return result;
}

CUresult GetProcAddressV2(cuGetProcAddress_v2_fn real, const char* symbol, void** pfn,
                          int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  CUresult result = real(symbol, pfn, cuda_version, flags, status);
  if (result == kCudaSuccess) WrapProc(symbol, pfn, cuda_version);
  return result;
}

}  // namespace cuda_impl
}  // namespace retain::shim
