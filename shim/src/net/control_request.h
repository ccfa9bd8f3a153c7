// control_request: the head of one request to the control endpoint
// (net/control_server.h), parsed by length. The bytes are a client's: never
// NUL-terminated, and they may hold anything, NUL bytes included; nothing
// here reads past the length it is given.
//
// Pure functions: no state, no allocation, no system calls. Thread-safe and
// async-signal-safe.
#ifndef RETAIN_SHIM_SRC_NET_CONTROL_REQUEST_H_
#define RETAIN_SHIM_SRC_NET_CONTROL_REQUEST_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// A request head is at most this long (a longer one gets 431), and its body
// (Content-Length) at most kControlBodyLimit (413): no endpoint reads a
// body, so it is only read to its end and dropped.
inline constexpr size_t kControlHeadLimit = 8192;
inline constexpr uint64_t kControlBodyLimit = 4096;

// Pointers into the parsed head.
struct ControlRequest {
  const char* method;
  size_t method_length;
  const char* path;  // the target up to '?'
  size_t path_length;
  const char* query;  // after '?'; nullptr when the target has none
  size_t query_length;
  uint64_t content_length;  // 0 when absent
};

// The length of the request head at the start of data[0, size), through its
// blank line ("\r\n\r\n"); 0 while it is not complete.
size_t ControlHeadLength(const char* data, size_t size);

// Parses a complete head, data[0, length) ending with "\r\n\r\n". Returns 0
// and fills `request` when it is well formed; otherwise the status to answer:
//   400  malformed: a NUL or other control byte, a bare CR or LF, a request
//        line that is not "METHOD SP /target SP HTTP/1.0|1.1", a header line
//        without a name and colon, a bad or a second, different
//        Content-Length
//   413  a Content-Length over kControlBodyLimit
//   501  a Transfer-Encoding (only Content-Length bodies are read)
int ParseControlHead(const char* data, size_t length, ControlRequest* request);

// The value of `name`=value in the query string [query, query + length):
// sets *value and returns its length, or returns -1 when absent. `name` is
// the shim's own NUL-terminated literal.
long ControlQueryValue(const char* query, size_t length, const char* name, const char** value);

// True if [text, text + length) is exactly `token` (NUL-terminated).
bool ControlTokenIs(const char* text, size_t length, const char* token);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_CONTROL_REQUEST_H_
