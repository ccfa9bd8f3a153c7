// http_sniffer: follows the HTTP/1.x conversation on one accepted socket,
// from the bytes the server reads (requests) and writes (responses), to
// tell when a request starts (its head: method, path, X-Request-Id) and
// when its response is complete.
//
// A streaming state machine: no byte is buffered beyond fixed-size fields
// (method, path, request id, the header name and value being read), so a
// connection costs sizeof(HttpSniffer) whatever the traffic. Request bodies
// are skipped by Content-Length or chunked encoding so pipelined requests
// are found; responses end when their Content-Length is satisfied, at the
// chunked terminator, or when the connection closes (no length, HTTP/1.0);
// a request whose response is cut by the close (a client that left a
// stream) is aborted.
// 1xx responses do not end a request; HEAD requests and 204/304 responses
// have no body. Anything that is not HTTP/1.x (TLS, HTTP/2 preface, a binary
// protocol), or a head over kMaxHeadBytes, makes the connection ignored for
// good: the sniffer never guesses.
//
// Never reads or writes the host's bytes beyond inspecting them, never
// allocates, never blocks. Thread-compatible: the caller serializes calls
// for one connection.
#ifndef RETAIN_SHIM_SRC_NET_HTTP_SNIFFER_H_
#define RETAIN_SHIM_SRC_NET_HTTP_SNIFFER_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

inline constexpr size_t kMaxHeadBytes = 64 * 1024;
inline constexpr size_t kMaxMethod = 16;
inline constexpr size_t kMaxPath = 256;         // longer paths are truncated
inline constexpr size_t kMaxRequestId = 128;    // longer ids are truncated
inline constexpr int kMaxPendingRequests = 32;  // pipelined, awaiting responses

struct HttpRequestHead {
  char method[kMaxMethod];         // NUL-terminated, e.g. "POST"
  char path[kMaxPath];             // NUL-terminated, without the query string
  char request_id[kMaxRequestId];  // X-Request-Id value, "" if absent
};

enum class HttpEventType {
  kRequestStarted,     // a complete request head was read: `head` is valid
  kResponseFinished,   // the response to the oldest open request is complete
  kRequestAborted,     // the oldest open request ends without a complete
                       // response: the connection closed first
  kConnectionIgnored,  // not HTTP/1.x or over a limit: no more events
};

struct HttpEvent {
  HttpEventType type;
  HttpRequestHead head;  // for kRequestStarted
};

// Receives events as bytes are fed; must not call back into the sniffer.
// (A function pointer, not a virtual class: the shim links no C++ runtime,
// and a pure virtual would need one.)
struct HttpEventSink {
  void (*on_event)(void* context, const HttpEvent& event);
  void* context;
};

class HttpSniffer {
 public:
  // Bytes the server read from the connection, in order.
  void OnInbound(const char* data, size_t size, HttpEventSink& sink);
  // Bytes the server wrote to the connection, in order.
  void OnOutbound(const char* data, size_t size, HttpEventSink& sink);
  // The connection closed: a response delimited by the close (no length)
  // is complete now (kResponseFinished); every other request still open,
  // whether its response was cut mid-body or never started, gets
  // kRequestAborted, oldest first.
  void OnClose(HttpEventSink& sink);
  // The connection broke before its end (a reset, or a relay that could
  // not deliver the response): every request still open gets
  // kRequestAborted, oldest first, a close-delimited response included.
  void OnReset(HttpEventSink& sink);
  bool ignored() const;
  // Requests read whose responses are not complete yet.
  int pending() const { return pending_; }

  // Fields: the class must be trivially constructible and valid when
  // zero-filled (the shim keeps one per socket in zeroed arena memory), with
  // no pointers into itself (it may be copied). Every zero value below is
  // the initial state.
 private:
  static constexpr int kNameCapacity = 23;  // "transfer-encoding" is 17

  // The parse of one direction: a message's start line, headers and body.
  // Zero is "before a start line". Reset to zero after each message.
  struct Stream {
    uint64_t remaining;        // body bytes left (Content-Length or a chunk)
    uint64_t number;           // Content-Length value being read
    uint64_t content_length;   // Content-Length of this message (has_length)
    uint32_t head_bytes;       // bytes of this head so far (<= kMaxHeadBytes)
    uint16_t status;           // response status code
    uint8_t state;             // a ParseState (net/http_sniffer.cc)
    uint8_t index;             // position in a literal / digit count
    uint8_t field;             // the header whose value is being read
    uint8_t phase;             // where in that value (leading space, ...)
    uint8_t name_length;       // of `name`; kNameCapacity + 1: too long
    int8_t te_match;           // "chunked" matched so far in the last coding
    bool saw_cr;               // a CR was read: the next byte must be LF
    bool has_length;           // a Content-Length header was read
    bool has_te;               // a Transfer-Encoding header was read
    bool te_chunked;           // ... and its last coding is "chunked"
    bool te_space;             // whitespace followed the current coding
    char name[kNameCapacity];  // header name being read, lowercased
  };
  enum Mode : uint8_t { kActive = 0, kIgnored = 1, kClosed = 2 };

  void Feed(Stream& s, bool inbound, const char* data, size_t size, HttpEventSink& sink);
  void Step(Stream& s, bool inbound, unsigned char c, HttpEventSink& sink);
  void StartValue(Stream& s, bool inbound);
  void ValueByte(Stream& s, unsigned char c, HttpEventSink& sink);
  void EndValue(Stream& s, HttpEventSink& sink);
  void EndOfHead(Stream& s, bool inbound, HttpEventSink& sink);
  void EndOfRequestHead(Stream& s, HttpEventSink& sink);
  void EndOfResponseHead(Stream& s, HttpEventSink& sink);
  void EndOfBody(Stream& s, bool inbound, HttpEventSink& sink);
  void FinishResponse(HttpEventSink& sink);
  void FinishAll(HttpEventSink& sink);
  void AbortOldest(HttpEventSink& sink);
  void Ignore(HttpEventSink& sink);

  Stream in_;                  // requests (inbound bytes)
  Stream out_;                 // responses (outbound bytes)
  HttpRequestHead head_;       // the request head being read
  uint16_t path_length_;       // bytes stored in head_.path
  uint8_t method_length_;      // bytes stored in head_.method
  uint8_t request_id_length_;  // bytes stored in head_.request_id
  uint8_t request_id_keep_;    // ... up to the last non-blank one
  bool target_seen_;           // the request target is not empty
  bool path_done_;             // '?' or '#' read: the rest is not the path
  uint8_t pending_;            // open requests, <= kMaxPendingRequests
  uint32_t head_bits_;         // bit i: the i-th oldest open request is HEAD
  uint8_t mode_;               // a Mode
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_HTTP_SNIFFER_H_
