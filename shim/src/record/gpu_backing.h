// gpu_backing: which host blocks back which GPU allocation, so the tools
// count that memory once (Snapshot.gpu_backings in proto/retain.proto).
//
// A driver that keeps "device" memory in host RAM (lavapipe's
// vkAllocateMemory takes the block with posix_memalign; integrated GPUs,
// unified and managed memory, pinned host allocations that mmap) allocates
// that RAM inside the allocation call. The shim records those blocks as
// Kind::kGpuDriverHost (record/recorder.h HostKind) and the call's result
// as a GPU record; without a link the same bytes are two owners. While a
// thread is inside its outermost GPU call, every kGpuDriverHost block it
// records is noted (NoteGpuHostBlock); when the call's GPU record is made,
// the notes become that record's backing if they are large enough to be it
// (LinkGpuBacking): the blocks of at least a page (or half the allocation,
// if it is smaller), together at least half the allocation's size. Smaller
// blocks are the driver's bookkeeping (object structures; a discrete GPU's
// handles): they stay their own kGpuDriverHost rows.
//
// The links live in a fixed table (no allocation); an allocation whose link
// finds the table full is counted (GpuBackingsDropped) and stays two rows.
// A link ends with its GPU record (UnlinkGpuBacking).
#ifndef RETAIN_SHIM_SRC_RECORD_GPU_BACKING_H_
#define RETAIN_SHIM_SRC_RECORD_GPU_BACKING_H_

#include <cstddef>
#include <cstdint>

#include "record/kinds.h"

namespace retain::shim {

// Host blocks noted per GPU call: lavapipe takes one (plus its small object
// struct); more than this many, the largest are kept.
inline constexpr int kMaxBackingBlocks = 4;
// Links the table holds.
inline constexpr size_t kMaxGpuBackings = 4096;

struct GpuBacking {
  uintptr_t handle;                   // the GPU record's address column (device pointer or handle)
  uintptr_t host[kMaxBackingBlocks];  // heap block addresses or mapping starts
  uint64_t host_bytes;                // bytes of every block noted, kept or not
  uint8_t api;                        // GpuApi
  uint8_t count;                      // valid entries of host
  Kind kind;                          // the GPU record's kind
};

// Starts the thread's notes: called by the outermost GpuCall.
void BeginGpuHostNotes();
// A kGpuDriverHost block (heap pointer or mapping start) of `size` bytes was
// recorded on this thread inside a GPU call.
void NoteGpuHostBlock(uintptr_t address, uint64_t size);
// The thread's outermost GPU call made the record (api, handle) of `size`
// bytes: links the notes to it when they back it (see above).
void LinkGpuBacking(uint8_t api, Kind kind, uintptr_t handle, uint64_t size);
// The record (api, handle) is gone.
void UnlinkGpuBacking(uint8_t api, uintptr_t handle);

// Links held now (a snapshot of a program without GPU memory skips the copy).
size_t GpuBackingCount();
// Copies up to `capacity` links; returns how many.
size_t CopyGpuBackings(GpuBacking* out, size_t capacity);
uint64_t GpuBackingsDropped();

// fork(): the child keeps the links (its GPU records are the parent's
// copies) with a fresh lock.
void GpuBackingResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_GPU_BACKING_H_
