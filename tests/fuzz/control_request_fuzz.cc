// libFuzzer target for the control endpoint's request-head parser
// (shim/src/net/control_request.h).
//
// Input: the bytes a client sent. The target finds the head, parses it and
// looks values up in its query, the way the control endpoint does
// (net/control_server.cc, net/control_endpoints.cc), and checks
// that every pointer handed back lies inside the bytes (AddressSanitizer
// catches any read past them: libFuzzer's buffer is exactly the input), that
// a parsed head is well formed, and that parsing is a function of the bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "net/control_request.h"

namespace {

using retain::shim::ControlHeadLength;
using retain::shim::ControlQueryValue;
using retain::shim::ControlRequest;
using retain::shim::kControlBodyLimit;
using retain::shim::ParseControlHead;

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "control_request_fuzz: %s\n", what);
    abort();
  }
}

bool Inside(const char* p, size_t length, const char* begin, const char* end) {
  return p >= begin && p + length <= end;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const char* data = reinterpret_cast<const char*>(bytes);
  size_t head = ControlHeadLength(data, size);
  Check(head <= size, "head longer than the input");
  if (head == 0) {
    // Also what a client sends that never ends its head: parse it as is.
    ControlRequest request;
    int status = ParseControlHead(data, size, &request);
    Check(status != 0 || size >= 4, "a head shorter than its blank line");
    return 0;
  }
  Check(memcmp(data + head - 4, "\r\n\r\n", 4) == 0, "head does not end with a blank line");
  ControlRequest request;
  int status = ParseControlHead(data, head, &request);
  ControlRequest again;
  Check(ParseControlHead(data, head, &again) == status, "parsing is not a function of the bytes");
  Check(status == 0 || status == 400 || status == 413 || status == 501, "unexpected status");
  if (status != 0) return 0;
  const char* end = data + head;
  Check(request.method_length > 0 && Inside(request.method, request.method_length, data, end),
        "method outside the head");
  Check(request.path_length > 0 && Inside(request.path, request.path_length, data, end) &&
            request.path[0] == '/',
        "path outside the head or not absolute");
  Check(memchr(data, '\0', head) == nullptr, "a head with a NUL byte parsed");
  Check(request.content_length <= kControlBodyLimit, "body over the limit accepted");
  if (request.query != nullptr) {
    Check(Inside(request.query, request.query_length, data, end), "query outside the head");
    for (const char* name : {"label", "request", "x"}) {
      const char* value = nullptr;
      long length = ControlQueryValue(request.query, request.query_length, name, &value);
      if (length >= 0) {
        Check(Inside(value, static_cast<size_t>(length), request.query,
                     request.query + request.query_length),
              "query value outside the query");
      }
    }
  }
  return 0;
}
