// domain: see domain.h.
#include "tools/lib/domain.h"

namespace retain::tool {

bool IsDeviceKind(v1::Kind kind) {
  switch (kind) {
    case v1::KIND_HIP_DEVICE:
    case v1::KIND_HIP_MANAGED:
    case v1::KIND_VULKAN_DEVICE:
    case v1::KIND_CUDA_DEVICE:
    case v1::KIND_CUDA_MANAGED:
      return true;
    default:
      return false;
  }
}

std::string DomainName(v1::Kind kind) {
  switch (kind) {
    case v1::KIND_HIP_DEVICE:
    case v1::KIND_HIP_MANAGED:
      return "device:hip";
    case v1::KIND_VULKAN_DEVICE:
      return "device:vulkan";
    case v1::KIND_CUDA_DEVICE:
    case v1::KIND_CUDA_MANAGED:
      return "device:cuda";
    default:
      return "host";
  }
}

}  // namespace retain::tool
