// metal_swizzle: Metal buffers and heaps in the GPU live set (kind metal,
// GpuApi::kMetal), keyed by the object pointer, with their stack, request
// tag and birth sequence like every other record (record/gpu_recorder.h).
//
// NEVER COMPILED OR RUN: written without an Apple SDK or a Mac, against the
// documented Metal and Objective-C runtime APIs. See docs/macos-metal.md.
// Compiled without ARC (-fno-objc-arc): the hooks hand the original's +1
// objects back untouched and never retain or release anything themselves.
//
// Why swizzling. MTLDevice is a protocol: the object MTLCreateSystemDefaultDevice
// returns belongs to a private, GPU-specific class (AGXG13XFamilyDevice,
// MTLIGAccelDevice...), and programs call it through objc_msgSend (ggml-metal
// directly, MLX through metal-cpp), so there is no exported C symbol to
// interpose. The hooks replace the methods on that concrete class.
//
// When. Not in a constructor: creating a device there would load the GPU
// driver into every process run under the shim, Metal user or not. Instead
// the C entry points that hand out devices — MTLCreateSystemDefaultDevice,
// MTLCopyAllDevices, MTLCopyAllDevicesWithObserver — are dyld-interposed
// (like hooks/darwin/darwin_hooks.cc); each device's class is swizzled before the
// device reaches the program, so no buffer is made before the hooks are in.
//
// What is recorded (flags column, proto AllocationBlock.flags):
//   newBufferWithLength:options:            size = length
//   newBufferWithBytes:length:options:      size = length
//   newBufferWithBytesNoCopy:...deallocator: size 0, flag 0x8000: the bytes
//       are the caller's (ggml-metal wraps memory it took with vm_allocate),
//       already counted where they were allocated; the record shows who
//       wrapped them without counting them twice
//   newHeapWithDescriptor:                  size = heap.size, flag 0x4000
//   low 10 bits: the MTLResourceOptions (cache mode, storage mode, hazard
//   tracking).
// Buffers made from a heap are never recorded: the heap's bytes were. The
// heap's own buffer-making methods are swizzled too, with a GpuCall and no
// record, so that a device method the heap may call inside is not the
// outermost GPU call and records nothing.
//
// Host memory the driver takes inside any of these calls (vm_allocate,
// malloc) is gpu-driver-host, as for the other GPU APIs (GpuCall).
//
// Releases: the concrete class of every recorded buffer and heap gets its
// `dealloc` swizzled (before the object is returned), and dealloc removes
// the record before the real dealloc frees anything — the order every
// release hook keeps, so the address cannot be handed to a new object while
// its old record is still live. Rejected alternative: an associated object
// (objc_setAssociatedObject) whose own dealloc removes the record. It needs
// no swizzling of private classes, but associated objects are released only
// after the owner's memory is on its way back (object_dispose), so a new
// buffer at the same address could be recorded first and then have its
// record removed; and each sentinel is an Objective-C object on the host
// heap, which the shim never uses for its own state.
//
// Classes and slots. The replacement functions are templates over a slot
// index: each slot remembers the implementation it replaced on one class,
// so a subclass and its superclass can both be swizzled without either
// calling back into itself (the nested call is then not outermost and does
// not record; dealloc removal is idempotent: RemoveGpuRecordIfAny). A
// method a class only inherits is added to that class (class_addMethod)
// rather than changed on the superclass, which other classes share. When
// the slots run out, objects of the extra class are not recorded at all
// (better than records whose release would never be seen), and a warning
// says so once.
//
// Thread-safe: the slot tables are written under one os_unfair_lock and read
// without it; an original is published before the replacement is installed.
// Never allocates from the host heap itself (the Objective-C runtime may,
// under the re-entry guard: not recorded).
#if !defined(__APPLE__)
#error "hooks/darwin/metal_swizzle.mm is for the Darwin build only"
#endif

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <objc/runtime.h>
#include <os/lock.h>

#include <atomic>
#include <cstdint>

#include "base/log.h"
#include "record/gpu_recorder.h"
#include "record/hook_shape.h"

#define RETAIN_DYLD_INTERPOSE(replacement, original)                               \
  __attribute__((used)) static const struct {                                      \
    const void* replacement_fn;                                                    \
    const void* original_fn;                                                       \
  } retain_interpose_##original __attribute__((section("__DATA,__interpose"))) = { \
      (const void*)(unsigned long)&replacement, (const void*)(unsigned long)&original}

namespace retain::shim::metal {
namespace {

using NewBufferWithLengthFn = id (*)(id, SEL, NSUInteger, MTLResourceOptions);
using NewBufferWithBytesFn = id (*)(id, SEL, const void*, NSUInteger, MTLResourceOptions);
using NewBufferNoCopyFn = id (*)(id, SEL, void*, NSUInteger, MTLResourceOptions,
                                 void (^)(void*, NSUInteger));
using NewHeapFn = id (*)(id, SEL, MTLHeapDescriptor*);
using HeapNewBufferFn = id (*)(id, SEL, NSUInteger, MTLResourceOptions);
using HeapNewBufferAtOffsetFn = id (*)(id, SEL, NSUInteger, MTLResourceOptions, NSUInteger);
using DeallocFn = void (*)(id, SEL);

constexpr uint16_t kOptionsMask = 0x03ff;
constexpr uint16_t kFlagHeap = 0x4000;
constexpr uint16_t kFlagNoCopy = 0x8000;

// A few device classes (one per GPU family present), heap classes, and
// buffer/heap classes whose dealloc is watched.
constexpr int kDeviceSlots = 4;
constexpr int kHeapSlots = 4;
constexpr int kReleaseSlots = 8;

struct DeviceSlot {
  std::atomic<uintptr_t> owner;  // the Class, as an integer (see ClassKey)
  std::atomic<NewBufferWithLengthFn> new_buffer_with_length;
  std::atomic<NewBufferWithBytesFn> new_buffer_with_bytes;
  std::atomic<NewBufferNoCopyFn> new_buffer_no_copy;
  std::atomic<NewHeapFn> new_heap;
};
struct HeapSlot {
  std::atomic<uintptr_t> owner;  // the Class, as an integer (see ClassKey)
  std::atomic<HeapNewBufferFn> new_buffer;
  std::atomic<HeapNewBufferAtOffsetFn> new_buffer_at_offset;
};
struct ReleaseSlot {
  std::atomic<uintptr_t> owner;  // the Class, as an integer (see ClassKey)
  std::atomic<DeallocFn> dealloc;
};

// Zero-filled static storage: usable before any initialiser runs. (The IMP
// tables below are `const`, not constexpr: a function-to-IMP cast is a
// reinterpret_cast; they are only read after a device exists.)
constinit DeviceSlot g_device_slots[kDeviceSlots];
constinit HeapSlot g_heap_slots[kHeapSlots];
constinit ReleaseSlot g_release_slots[kReleaseSlots];
constinit os_unfair_lock g_swizzle_lock{};  // zero: OS_UNFAIR_LOCK_INIT
std::atomic<bool> g_warned_out_of_slots;

// Slots hold their class as an integer: clang treats `Class` as an
// Objective-C object type, which std::atomic does not take.
inline uintptr_t ClassKey(Class cls) { return reinterpret_cast<uintptr_t>((void*)cls); }

__attribute__((noinline, cold)) void WarnOutOfSlots(Class cls) {
  if (!g_warned_out_of_slots.exchange(true, std::memory_order_relaxed)) {
    LogWarning("too many Metal classes; objects of %s are not recorded", class_getName(cls));
  }
}

// Replaces `selector` on `cls` itself with `replacement`, publishing the
// implementation it replaces in `original` first. False when `cls` does not
// respond to `selector` (a method newer than this macOS).
template <typename Fn>
bool Install(Class cls, SEL selector, IMP replacement, std::atomic<Fn>& original) {
  Method method = class_getInstanceMethod(cls, selector);
  if (method == nullptr) return false;
  original.store(reinterpret_cast<Fn>(method_getImplementation(method)), std::memory_order_release);
  if (!class_addMethod(cls, selector, replacement, method_getTypeEncoding(method))) {
    // `cls` defines the method itself, so `method` is its own: replace in
    // place, keeping what was really there (another swizzler may have run).
    IMP previous = method_setImplementation(method, replacement);
    original.store(reinterpret_cast<Fn>(previous), std::memory_order_release);
  }
  return true;
}

// The slot of `cls` in `slots`, claiming and filling a free one with
// `install(slot_index)` the first time. -1 when the slots are full.
template <typename Slot, int kCount, typename InstallFn>
int SlotFor(Slot (&slots)[kCount], Class cls, InstallFn install) {
  const uintptr_t key = ClassKey(cls);
  for (int i = 0; i < kCount; ++i) {  // fast path, no lock
    if (slots[i].owner.load(std::memory_order_acquire) == key) return i;
  }
  os_unfair_lock_lock(&g_swizzle_lock);
  int found = -1;
  for (int i = 0; i < kCount && found < 0; ++i) {
    uintptr_t owner = slots[i].owner.load(std::memory_order_relaxed);
    if (owner == key) {
      found = i;
    } else if (owner == 0) {
      install(i);  // originals published before each replacement goes in
      slots[i].owner.store(key, std::memory_order_release);
      found = i;
    }
  }
  os_unfair_lock_unlock(&g_swizzle_lock);
  if (found < 0) WarnOutOfSlots(cls);
  return found;
}

// ---- dealloc of recorded buffers and heaps ----

template <int kSlot>
void ResourceDealloc(id self, SEL cmd) {
  if (ShimReady()) {
    BusyScope scope;
    // Also runs for objects never recorded (heap buffers, objects made
    // before the hooks): removes nothing and counts nothing then.
    RemoveGpuRecordIfAny(GpuApi::kMetal, reinterpret_cast<uintptr_t>(self));
  }
  // Outside the guard: the host blocks the driver frees now were recorded
  // (gpu-driver-host) and their frees must be seen.
  g_release_slots[kSlot].dealloc.load(std::memory_order_acquire)(self, cmd);
}

const IMP kResourceDealloc[kReleaseSlots] = {(IMP)&ResourceDealloc<0>, (IMP)&ResourceDealloc<1>,
                                             (IMP)&ResourceDealloc<2>, (IMP)&ResourceDealloc<3>,
                                             (IMP)&ResourceDealloc<4>, (IMP)&ResourceDealloc<5>,
                                             (IMP)&ResourceDealloc<6>, (IMP)&ResourceDealloc<7>};

// True once `object`'s class has its dealloc watched.
bool WatchRelease(id object) {
  Class cls = object_getClass(object);
  return SlotFor(g_release_slots, cls, [cls](int slot) {
           Install(cls, @selector(dealloc), kResourceDealloc[slot], g_release_slots[slot].dealloc);
         }) >= 0;
}

// Records `object` when this is the program's outermost GPU call and its
// release can be seen.
void Record(const GpuCall& call, id object, uint64_t size, uint16_t flags) {
  if (object == nil || !call.records() || !HookReady()) return;
  {
    BusyScope busy;  // the runtime allocates while swizzling
    if (!WatchRelease(object)) return;
  }
  RecordGpuAlloc(GpuApi::kMetal, reinterpret_cast<uintptr_t>(object), size, Kind::kMetal, flags);
}

uint16_t OptionBits(MTLResourceOptions options) {
  return static_cast<uint16_t>(options & kOptionsMask);
}

// ---- heap classes: buffer creation counted by the heap already ----

template <int kSlot>
id HeapNewBuffer(id self, SEL cmd, NSUInteger length, MTLResourceOptions options) {
  GpuCall call;  // no record: makes any nested device call not outermost
  return g_heap_slots[kSlot].new_buffer.load(std::memory_order_acquire)(self, cmd, length, options);
}

template <int kSlot>
id HeapNewBufferAtOffset(id self, SEL cmd, NSUInteger length, MTLResourceOptions options,
                         NSUInteger offset) {
  GpuCall call;
  return g_heap_slots[kSlot].new_buffer_at_offset.load(std::memory_order_acquire)(self, cmd, length,
                                                                                  options, offset);
}

#define RETAIN_SLOT_IMPS_4(fn) \
  { (IMP) & fn<0>, (IMP)&fn<1>, (IMP)&fn<2>, (IMP)&fn<3> }
const IMP kHeapNewBuffer[kHeapSlots] = RETAIN_SLOT_IMPS_4(HeapNewBuffer);
const IMP kHeapNewBufferAtOffset[kHeapSlots] = RETAIN_SLOT_IMPS_4(HeapNewBufferAtOffset);

void WatchHeapClass(id heap) {
  BusyScope busy;
  Class cls = object_getClass(heap);
  SlotFor(g_heap_slots, cls, [cls](int slot) {
    Install(cls, @selector(newBufferWithLength:options:), kHeapNewBuffer[slot],
            g_heap_slots[slot].new_buffer);
    // Placement heaps (macOS 10.15+); absent on older systems.
    Install(cls, @selector(newBufferWithLength:options:offset:), kHeapNewBufferAtOffset[slot],
            g_heap_slots[slot].new_buffer_at_offset);
  });
}

// ---- device classes ----

template <int kSlot>
id DeviceNewBufferWithLength(id self, SEL cmd, NSUInteger length, MTLResourceOptions options) {
  GpuCall call;
  id buffer = g_device_slots[kSlot].new_buffer_with_length.load(std::memory_order_acquire)(
      self, cmd, length, options);
  Record(call, buffer, length, OptionBits(options));
  return buffer;
}

template <int kSlot>
id DeviceNewBufferWithBytes(id self, SEL cmd, const void* bytes, NSUInteger length,
                            MTLResourceOptions options) {
  GpuCall call;
  id buffer = g_device_slots[kSlot].new_buffer_with_bytes.load(std::memory_order_acquire)(
      self, cmd, bytes, length, options);
  Record(call, buffer, length, OptionBits(options));
  return buffer;
}

template <int kSlot>
id DeviceNewBufferNoCopy(id self, SEL cmd, void* bytes, NSUInteger length,
                         MTLResourceOptions options, void (^deallocator)(void*, NSUInteger)) {
  GpuCall call;
  id buffer = g_device_slots[kSlot].new_buffer_no_copy.load(std::memory_order_acquire)(
      self, cmd, bytes, length, options, deallocator);
  Record(call, buffer, 0, static_cast<uint16_t>(OptionBits(options) | kFlagNoCopy));
  return buffer;
}

template <int kSlot>
id DeviceNewHeap(id self, SEL cmd, MTLHeapDescriptor* descriptor) {
  GpuCall call;
  id heap = g_device_slots[kSlot].new_heap.load(std::memory_order_acquire)(self, cmd, descriptor);
  if (heap != nil && call.records() && HookReady()) {
    WatchHeapClass(heap);  // before the program can make buffers from it
    id<MTLHeap> typed = (id<MTLHeap>)heap;
    Record(call, heap, [typed size],
           static_cast<uint16_t>(OptionBits([typed resourceOptions]) | kFlagHeap));
  }
  return heap;
}

const IMP kDeviceNewBufferWithLength[kDeviceSlots] = RETAIN_SLOT_IMPS_4(DeviceNewBufferWithLength);
const IMP kDeviceNewBufferWithBytes[kDeviceSlots] = RETAIN_SLOT_IMPS_4(DeviceNewBufferWithBytes);
const IMP kDeviceNewBufferNoCopy[kDeviceSlots] = RETAIN_SLOT_IMPS_4(DeviceNewBufferNoCopy);
const IMP kDeviceNewHeap[kDeviceSlots] = RETAIN_SLOT_IMPS_4(DeviceNewHeap);
#undef RETAIN_SLOT_IMPS_4

void WatchDevice(id device) {
  if (device == nil || !HookReady()) return;
  BusyScope busy;
  Class cls = object_getClass(device);
  SlotFor(g_device_slots, cls, [cls](int slot) {
    DeviceSlot& s = g_device_slots[slot];
    Install(cls, @selector(newBufferWithLength:options:), kDeviceNewBufferWithLength[slot],
            s.new_buffer_with_length);
    Install(cls, @selector(newBufferWithBytes:length:options:), kDeviceNewBufferWithBytes[slot],
            s.new_buffer_with_bytes);
    Install(cls, @selector(newBufferWithBytesNoCopy:length:options:deallocator:),
            kDeviceNewBufferNoCopy[slot], s.new_buffer_no_copy);
    Install(cls, @selector(newHeapWithDescriptor:), kDeviceNewHeap[slot], s.new_heap);
  });
}

// ---- the C entry points that hand out devices (dyld-interposed; inside
// this image the names reach Metal's originals) ----

id<MTLDevice> RetainCreateSystemDefaultDevice(void) {
  id<MTLDevice> device = MTLCreateSystemDefaultDevice();
  WatchDevice(device);
  return device;
}

NSArray<id<MTLDevice>>* RetainCopyAllDevices(void) {
  NSArray<id<MTLDevice>>* devices = MTLCopyAllDevices();
  for (NSUInteger i = 0; i < [devices count]; ++i) WatchDevice([devices objectAtIndex:i]);
  return devices;
}

// Devices attached later reach the program through `handler` as
// notifications; the program then uses devices from this array or from a
// later MTLCopyAllDevices, both watched. A device that appears only in a
// notification is not (listed in docs/macos-metal.md).
NSArray<id<MTLDevice>>* RetainCopyAllDevicesWithObserver(id<NSObject>* observer,
                                                         MTLDeviceNotificationHandler handler) {
  NSArray<id<MTLDevice>>* devices = MTLCopyAllDevicesWithObserver(observer, handler);
  for (NSUInteger i = 0; i < [devices count]; ++i) WatchDevice([devices objectAtIndex:i]);
  return devices;
}

}  // namespace
}  // namespace retain::shim::metal

using namespace retain::shim::metal;
RETAIN_DYLD_INTERPOSE(RetainCreateSystemDefaultDevice, MTLCreateSystemDefaultDevice);
RETAIN_DYLD_INTERPOSE(RetainCopyAllDevices, MTLCopyAllDevices);
RETAIN_DYLD_INTERPOSE(RetainCopyAllDevicesWithObserver, MTLCopyAllDevicesWithObserver);
