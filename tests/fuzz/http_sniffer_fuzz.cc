// libFuzzer target for the HTTP/1.x sniffer (shim/src/net/http_sniffer.h).
//
// Input: records, each a tag byte, a 2-byte little-endian length and that
// many bytes (cut short at the end of the input). tag % 16: 0..7 inbound,
// 8..14 outbound, 15 close (the bytes of a close record are skipped).
//
// The records drive three sniffers: A gets each record whole, B byte by
// byte, and C gets each record in pieces whose sizes come from the record's
// own bytes, and is copied (memcpy) into a fresh object between records.
// All three must report the same events, and the events must be
// consistent: never more finished than started, never more open than
// kMaxPendingRequests, kConnectionIgnored at most once and last, heads
// NUL-terminated and well formed, every started request finished by the
// close or the ignore.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "net/http_sniffer.h"

namespace {

using retain::shim::HttpEvent;
using retain::shim::HttpEventSink;
using retain::shim::HttpEventType;
using retain::shim::HttpSniffer;
using retain::shim::kMaxMethod;
using retain::shim::kMaxPath;
using retain::shim::kMaxPendingRequests;
using retain::shim::kMaxRequestId;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

size_t BoundedLength(const char* field, size_t capacity) {
  size_t n = 0;
  while (n < capacity && field[n] != '\0') ++n;
  Check(n < capacity, "head field is NUL-terminated");
  return n;
}

struct Log {
  std::string events;  // a transcript, compared across sniffers
  int started = 0;
  int finished = 0;  // ended: finished or aborted
  bool ignored = false;
  bool closing = false;  // inside OnClose
  bool closed = false;   // OnClose returned

  static void OnEvent(void* context, const HttpEvent& event) {
    auto* log = static_cast<Log*>(context);
    Check(!log->ignored, "no event after kConnectionIgnored");
    switch (event.type) {
      case HttpEventType::kRequestStarted: {
        size_t method = BoundedLength(event.head.method, kMaxMethod);
        size_t path = BoundedLength(event.head.path, kMaxPath);
        size_t id = BoundedLength(event.head.request_id, kMaxRequestId);
        Check(method > 0, "method is not empty");
        for (size_t i = 0; i < method; ++i) {
          char c = event.head.method[i];
          Check((c >= 'A' && c <= 'Z') || c == '-' || c == '_', "method is an uppercase token");
        }
        for (size_t i = 0; i < path; ++i) {
          Check(event.head.path[i] != '?' && event.head.path[i] != ' ',
                "path holds no query and no blank");
        }
        if (id > 0) {
          Check(event.head.request_id[0] != ' ' && event.head.request_id[id - 1] != ' ',
                "request id is trimmed");
        }
        ++log->started;
        Check(log->started - log->finished <= kMaxPendingRequests,
              "open requests within kMaxPendingRequests");
        log->events += "S";
        log->events.append(event.head.method, method);
        log->events += ' ';
        log->events.append(event.head.path, path);
        log->events += ' ';
        log->events.append(event.head.request_id, id);
        log->events += '\n';
        break;
      }
      case HttpEventType::kResponseFinished:
        ++log->finished;
        Check(log->finished <= log->started, "never more finished than started");
        Check(!log->closed, "nothing finishes after the close's events");
        log->events += "F\n";
        break;
      case HttpEventType::kRequestAborted:
        // Only the close aborts; what it aborts still counts as ended.
        ++log->finished;
        Check(log->finished <= log->started, "never more ended than started");
        Check(log->closing, "only a close aborts a request");
        log->events += "A\n";
        break;
      case HttpEventType::kConnectionIgnored:
        log->ignored = true;
        Check(log->finished == log->started, "ignoring finishes open requests");
        log->events += "I\n";
        break;
      default:
        Check(false, "known event type");
    }
  }
};

struct Driver {
  HttpSniffer sniffer;
  Log log;
  HttpEventSink sink{&Log::OnEvent, &log};
  bool closed = false;

  Driver() { std::memset(static_cast<void*>(&sniffer), 0, sizeof sniffer); }

  void Feed(bool inbound, const uint8_t* data, size_t size) {
    const char* bytes = reinterpret_cast<const char*>(data);
    if (inbound) {
      sniffer.OnInbound(bytes, size, sink);
    } else {
      sniffer.OnOutbound(bytes, size, sink);
    }
    Check(sniffer.ignored() == log.ignored, "ignored() matches the event");
  }

  void Close() {
    log.closing = true;
    sniffer.OnClose(sink);
    log.closing = false;
    log.closed = true;
    closed = true;
    Check(log.finished == log.started, "close ends every request");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Driver whole, bytewise, pieces;
  size_t pos = 0;
  while (pos < size) {
    const uint8_t tag = data[pos++];
    size_t length = 0;
    if (pos < size) length = data[pos++];
    if (pos < size) length |= static_cast<size_t>(data[pos++]) << 8;
    if (length > size - pos) length = size - pos;
    const uint8_t* record = data + pos;
    pos += length;

    const int kind = tag % 16;
    if (kind == 15) {
      whole.Close();
      bytewise.Close();
      pieces.Close();
      continue;
    }
    const bool inbound = kind < 8;
    whole.Feed(inbound, record, length);
    for (size_t i = 0; i < length; ++i) bytewise.Feed(inbound, record + i, 1);
    for (size_t i = 0; i < length;) {
      size_t piece = 1 + (record[i] * 7 + tag) % 97;
      if (piece > length - i) piece = length - i;
      pieces.Feed(inbound, record + i, piece);
      i += piece;
    }
    HttpSniffer copy;
    std::memcpy(static_cast<void*>(&copy), &pieces.sniffer, sizeof copy);
    std::memset(static_cast<void*>(&pieces.sniffer), 0xa5, sizeof copy);
    std::memcpy(static_cast<void*>(&pieces.sniffer), &copy, sizeof copy);
  }
  Check(whole.log.events == bytewise.log.events, "byte by byte: same events");
  Check(whole.log.events == pieces.log.events, "in pieces: same events");
  whole.Close();
  Check(whole.log.finished == whole.log.started || whole.log.ignored, "every request finished");
  return 0;
}
