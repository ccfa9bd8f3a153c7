// domain: where a kind's bytes live, so host and device memory are never
// added into one figure.
//
// The host domain is the process's RAM, what RSS counts: the heap, mappings,
// a GPU driver's host memory, pinned host allocations (hip-host, cuda-host)
// and Metal buffers (unified memory on Apple silicon). Each GPU API's device
// memory (hip-device, vulkan-device, cuda-device, and managed memory, which
// lives on the device while the device uses it) is a domain of its own,
// "device:hip", "device:vulkan", "device:cuda": memory the driver commits
// when it is allocated, so its resident bytes are its allocated bytes.
//
// A GPU allocation the driver made of host memory inside the call (lavapipe,
// integrated GPUs: Snapshot.gpu_backings) is host memory: the reader turns
// it into one gpu-driver-host row under the program's stack
// (FlattenAllocations), so it is in the host domain and counted once.
#ifndef RETAIN_TOOLS_LIB_DOMAIN_H_
#define RETAIN_TOOLS_LIB_DOMAIN_H_

#include <string>

#include "retain.pb.h"

namespace retain::tool {

// True for the kinds of device memory (see above).
bool IsDeviceKind(v1::Kind kind);

// "host", or "device:" + the API ("device:vulkan").
std::string DomainName(v1::Kind kind);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DOMAIN_H_
