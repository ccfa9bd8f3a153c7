// kinds: the memory kinds of proto/retain.proto's `Kind` enum as one table,
// shared by the shim (record/kinds.h, the control endpoint's /stats and
// /metrics) and the tools (KindName in tools/lib/snapshot_reader.h), so the
// names agree everywhere.
//
// RETAIN_FOR_EACH_KIND(X) expands X(shim, proto, value, name) per kind:
// `shim` the shim's Kind enumerator (record/kinds.h), `proto` the enumerator
// in retain.proto, `value` its number on disk, `name` the hyphenated name
// the tools, the docs and the control endpoint print. The shim never links
// protobuf, so this header includes nothing; the tools check each row
// against the generated enum (static_asserts in tools/lib/snapshot_reader.cc,
// tests/unit/tools/snapshot_reader_test.cc) and the shim its enum against the
// proto (tests/unit/shim/record/kinds_test.cc).
//
// Header only, constants only: safe anywhere, in a hook or a signal handler.
#ifndef RETAIN_PROTO_KINDS_H_
#define RETAIN_PROTO_KINDS_H_

#define RETAIN_FOR_EACH_KIND(X)                                 \
  X(kUnspecified, KIND_UNSPECIFIED, 0, "unspecified")           \
  X(kHeap, KIND_HEAP, 1, "heap")                                \
  X(kMmapAnon, KIND_MMAP_ANON, 2, "mmap-anon")                  \
  X(kMmapFile, KIND_MMAP_FILE, 3, "mmap-file")                  \
  X(kGpuDriverHost, KIND_GPU_DRIVER_HOST, 4, "gpu-driver-host") \
  X(kHipDevice, KIND_HIP_DEVICE, 10, "hip-device")              \
  X(kHipHost, KIND_HIP_HOST, 11, "hip-host")                    \
  X(kHipManaged, KIND_HIP_MANAGED, 12, "hip-managed")           \
  X(kVulkanDevice, KIND_VULKAN_DEVICE, 20, "vulkan-device")     \
  X(kCudaDevice, KIND_CUDA_DEVICE, 30, "cuda-device")           \
  X(kCudaHost, KIND_CUDA_HOST, 31, "cuda-host")                 \
  X(kCudaManaged, KIND_CUDA_MANAGED, 32, "cuda-managed")        \
  X(kMetal, KIND_METAL, 40, "metal")

namespace retain::kinds {

// The name of the kind numbered `value` on disk, or nullptr for a number the
// table does not hold (a newer shim's kind: the caller chooses what to say).
constexpr const char* NameOf(int value) {
#define RETAIN_KIND_NAME_CASE(shim, proto, number, name) \
  if (value == (number)) return name;
  RETAIN_FOR_EACH_KIND(RETAIN_KIND_NAME_CASE)
#undef RETAIN_KIND_NAME_CASE
  return nullptr;
}

}  // namespace retain::kinds

#endif  // RETAIN_PROTO_KINDS_H_
