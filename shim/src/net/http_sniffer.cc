// http_sniffer: see net/http_sniffer.h.
//
// Runs inside read/write hooks: never allocates, never makes a system call,
// never blocks, touches nothing but `*this`, the bytes it is shown and the
// event it hands the sink. O(1) per byte; bodies are skipped in bulk.
//
// The parse is strict where a guess could misattribute a request (the start
// lines, header names, framing headers, chunk sizes) and lenient where
// nothing depends on it (reason phrases, header values it does not read,
// chunk extensions, trailers). Whatever it cannot frame ends in Ignore().
#include "net/http_sniffer.h"

#include <type_traits>

namespace retain::shim {

static_assert(std::is_trivially_copyable_v<HttpSniffer>);
static_assert(std::is_trivially_default_constructible_v<HttpSniffer>);
static_assert(kMaxPendingRequests <= 32, "head_bits_ holds one bit each");
static_assert(kMaxPath - 1 <= 0xffff && kMaxMethod - 1 <= 0xff && kMaxRequestId - 1 <= 0xff,
              "length fields are this narrow");

namespace {

// Where a Stream is. Zero is the start of a message. Everything below
// kFirstBodyState is part of the head and counts against kMaxHeadBytes.
enum ParseState : uint8_t {
  kLineStart = 0,    // before the start line: empty lines are skipped
  kMethod,           // request: the method token
  kTarget,           // request: the request target, up to SP
  kVersion,          // "HTTP/1.<digit>" (index: how much matched)
  kStatus,           // response: three digits (index: how many)
  kReason,           // response: reason phrase, to the end of the line
  kHeaderLineStart,  // a header line, or the empty line ending the head
  kHeaderName,
  kHeaderValue,
  kFirstBodyState,
  kBodyLength = kFirstBodyState,  // `remaining` bytes of body
  kChunkSize,                     // hex digits (index: how many)
  kChunkSizeSpace,                // blanks after the size, before ';' or the line end
  kChunkExtension,                // skipped to the line end
  kChunkData,                     // `remaining` bytes of chunk
  kChunkDataEnd,                  // the CRLF after a chunk's data
  kTrailerLineStart,              // a trailer line, or the empty line ending the body
  kTrailerLine,                   // skipped to the line end
  kUntilClose,                    // response body delimited by the connection's close
};

enum HeaderField : uint8_t {
  kFieldOther = 0,
  kFieldRequestId,
  kFieldContentLength,
  kFieldTransferEncoding,
};

constexpr char kHttpVersionPrefix[] = "HTTP/1.";  // then one digit
constexpr int kHttpVersionPrefixLength = 7;
constexpr char kChunked[] = "chunked";
constexpr int kChunkedLength = 7;
constexpr int kMaxChunkSizeDigits = 15;             // < 2^60: no overflow
constexpr uint64_t kMaxContentLength = 1ull << 60;  // larger: malformed

bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsUpper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
bool IsBlank(unsigned char c) { return c == ' ' || c == '\t'; }
unsigned char Lower(unsigned char c) { return IsUpper(c) ? c + ('a' - 'A') : c; }

// RFC 9110 tchar.
bool IsTokenChar(unsigned char c) {
  if (IsDigit(c) || IsUpper(c) || (c >= 'a' && c <= 'z')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

int HexValue(unsigned char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool NameIs(const char* name, int length, const char* literal) {
  int i = 0;
  for (; i < length; ++i) {
    if (literal[i] == '\0' || literal[i] != name[i]) return false;
  }
  return literal[i] == '\0';
}

void Emit(HttpEventSink& sink, const HttpEvent& event) {
  if (sink.on_event != nullptr) sink.on_event(sink.context, event);
}

void EmitType(HttpEventSink& sink, HttpEventType type) {
  HttpEvent event{};
  event.type = type;
  Emit(sink, event);
}

}  // namespace

bool HttpSniffer::ignored() const { return mode_ == kIgnored; }

void HttpSniffer::OnInbound(const char* data, size_t size, HttpEventSink& sink) {
  Feed(in_, /*inbound=*/true, data, size, sink);
}

void HttpSniffer::OnOutbound(const char* data, size_t size, HttpEventSink& sink) {
  Feed(out_, /*inbound=*/false, data, size, sink);
}

void HttpSniffer::OnClose(HttpEventSink& sink) {
  if (mode_ != kActive) return;
  // A response delimited by the close is the oldest open request's, and
  // complete; every other open request ends unanswered or cut short.
  if (out_.state == kUntilClose) FinishResponse(sink);
  while (pending_ > 0) AbortOldest(sink);
  mode_ = kClosed;
}

void HttpSniffer::OnReset(HttpEventSink& sink) {
  if (mode_ != kActive) return;
  while (pending_ > 0) AbortOldest(sink);
  mode_ = kClosed;
}

void HttpSniffer::Feed(Stream& s, bool inbound, const char* data, size_t size,
                       HttpEventSink& sink) {
  if (data == nullptr) return;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(data);
  size_t i = 0;
  while (i < size && mode_ == kActive) {
    if (s.state == kBodyLength || s.state == kChunkData) {
      uint64_t n = size - i;
      if (n > s.remaining) n = s.remaining;
      i += n;
      s.remaining -= n;
      if (s.remaining == 0) {
        if (s.state == kChunkData) {
          s.state = kChunkDataEnd;
        } else {
          EndOfBody(s, inbound, sink);
        }
      }
      continue;
    }
    if (s.state == kUntilClose) return;  // only the close ends it
    Step(s, inbound, bytes[i++], sink);
  }
}

// One byte of a head, a chunk-size line or a trailer. Any return may have
// called Ignore(): Feed() checks mode_ before the next byte.
void HttpSniffer::Step(Stream& s, bool inbound, unsigned char c, HttpEventSink& sink) {
  if (s.state < kFirstBodyState && ++s.head_bytes > kMaxHeadBytes) {
    return Ignore(sink);
  }
  if (s.saw_cr) {
    // Only states where a line may end set saw_cr; the LF is then handled
    // by the state itself, as if the CR had not been there.
    if (c != '\n') return Ignore(sink);
    s.saw_cr = false;
  } else if (c == '\r' && s.state != kMethod && s.state != kTarget && s.state != kVersion &&
             s.state != kHeaderName) {
    // kVersion's line end is checked below: its CR is only valid at the end.
    s.saw_cr = true;
    return;
  }

  switch (s.state) {
    case kLineStart:
      if (c == '\n') return;  // empty lines before a start line
      if (inbound) {
        if (!IsUpper(c)) return Ignore(sink);  // TLS, binary, lowercase...
        head_ = HttpRequestHead{};
        path_length_ = 0;
        request_id_length_ = 0;
        request_id_keep_ = 0;
        target_seen_ = false;
        path_done_ = false;
        head_.method[0] = static_cast<char>(c);
        method_length_ = 1;
        s.state = kMethod;
      } else {
        if (c != static_cast<unsigned char>(kHttpVersionPrefix[0])) {
          return Ignore(sink);
        }
        s.index = 1;
        s.state = kVersion;
      }
      return;

    case kMethod:
      if (c == ' ') {
        s.state = kTarget;
      } else if ((IsUpper(c) || c == '-' || c == '_') && method_length_ < kMaxMethod - 1) {
        head_.method[method_length_++] = static_cast<char>(c);
      } else {
        return Ignore(sink);
      }
      return;

    case kTarget:
      if (c == ' ') {
        if (!target_seen_) return Ignore(sink);
        s.index = 0;
        s.state = kVersion;
        return;
      }
      if (c < 0x21 || c == 0x7f) return Ignore(sink);  // no " HTTP/1."
      target_seen_ = true;
      if (c == '?' || c == '#') path_done_ = true;
      if (!path_done_ && path_length_ < kMaxPath - 1) {
        head_.path[path_length_++] = static_cast<char>(c);
      }
      return;

    case kVersion:
      if (s.index < kHttpVersionPrefixLength) {
        if (c != static_cast<unsigned char>(kHttpVersionPrefix[s.index])) {
          return Ignore(sink);
        }
        ++s.index;
      } else if (s.index == kHttpVersionPrefixLength) {
        if (!IsDigit(c)) return Ignore(sink);
        ++s.index;
      } else if (inbound) {  // the request line ends here
        if (c == '\r') {
          s.saw_cr = true;
        } else if (c == '\n') {
          s.state = kHeaderLineStart;
        } else {
          return Ignore(sink);
        }
      } else {  // "HTTP/1.1 200"
        if (c != ' ') return Ignore(sink);
        s.index = 0;
        s.status = 0;
        s.state = kStatus;
      }
      return;

    case kStatus:
      if (s.index < 3) {
        if (!IsDigit(c) || (s.index == 0 && c == '0')) return Ignore(sink);
        s.status = static_cast<uint16_t>(s.status * 10 + (c - '0'));
        ++s.index;
      } else if (c == ' ') {
        s.state = kReason;
      } else if (c == '\n') {  // no reason phrase
        s.state = kHeaderLineStart;
      } else {
        return Ignore(sink);
      }
      return;

    case kReason:
      if (c == '\n') s.state = kHeaderLineStart;
      return;

    case kHeaderLineStart:
      if (c == '\n') return EndOfHead(s, inbound, sink);
      if (IsBlank(c)) {  // obsolete line folding: a value we do not read
        s.field = kFieldOther;
        s.state = kHeaderValue;
      } else if (IsTokenChar(c)) {
        s.name[0] = static_cast<char>(Lower(c));
        s.name_length = 1;
        s.state = kHeaderName;
      } else {
        return Ignore(sink);
      }
      return;

    case kHeaderName:
      if (c == ':') {
        StartValue(s, inbound);
        s.state = kHeaderValue;
      } else if (IsTokenChar(c)) {
        if (s.name_length < kNameCapacity) {
          s.name[s.name_length++] = static_cast<char>(Lower(c));
        } else {
          s.name_length = kNameCapacity + 1;  // not a name we read
        }
      } else {
        return Ignore(sink);  // including blanks before ':'
      }
      return;

    case kHeaderValue:
      if (c == '\n') {
        EndValue(s, sink);
        if (mode_ == kActive) s.state = kHeaderLineStart;
        return;
      }
      if (c == '\0') return Ignore(sink);  // RFC 9110 5.5: reject
      return ValueByte(s, c, sink);

    case kChunkSize: {
      int digit = HexValue(c);
      if (digit >= 0) {
        if (s.index >= kMaxChunkSizeDigits) return Ignore(sink);
        s.remaining = s.remaining * 16 + static_cast<uint64_t>(digit);
        ++s.index;
        return;
      }
      if (s.index == 0) return Ignore(sink);  // no digits
      if (c == ';') {
        s.state = kChunkExtension;
      } else if (IsBlank(c)) {
        s.state = kChunkSizeSpace;
      } else if (c == '\n') {
        s.state = s.remaining == 0 ? kTrailerLineStart : kChunkData;
      } else {
        return Ignore(sink);
      }
      return;
    }

    case kChunkSizeSpace:
      if (c == ';') {
        s.state = kChunkExtension;
      } else if (c == '\n') {
        s.state = s.remaining == 0 ? kTrailerLineStart : kChunkData;
      } else if (!IsBlank(c)) {
        return Ignore(sink);
      }
      return;

    case kChunkExtension:
      if (c == '\n') s.state = s.remaining == 0 ? kTrailerLineStart : kChunkData;
      return;

    case kChunkDataEnd:
      if (c != '\n') return Ignore(sink);
      s.index = 0;
      s.remaining = 0;
      s.state = kChunkSize;
      return;

    case kTrailerLineStart:
      if (c == '\n') return EndOfBody(s, inbound, sink);
      s.state = kTrailerLine;
      return;

    case kTrailerLine:
      if (c == '\n') s.state = kTrailerLineStart;
      return;

    default:  // the bulk states are Feed()'s; nothing else exists
      return Ignore(sink);
  }
}

void HttpSniffer::StartValue(Stream& s, bool inbound) {
  s.phase = 0;
  s.field = kFieldOther;
  const int length = s.name_length;
  if (inbound && NameIs(s.name, length, "x-request-id")) {
    s.field = kFieldRequestId;
    request_id_length_ = 0;  // the last X-Request-Id wins
    request_id_keep_ = 0;
  } else if (NameIs(s.name, length, "content-length")) {
    s.field = kFieldContentLength;
    s.number = 0;
  } else if (NameIs(s.name, length, "transfer-encoding")) {
    s.field = kFieldTransferEncoding;
    s.te_match = 0;
    s.te_space = false;
  }
}

void HttpSniffer::ValueByte(Stream& s, unsigned char c, HttpEventSink& sink) {
  switch (s.field) {
    case kFieldRequestId:
      if (s.phase == 0) {
        if (IsBlank(c)) return;  // leading blanks
        s.phase = 1;
      }
      if (request_id_length_ < kMaxRequestId - 1) {
        head_.request_id[request_id_length_++] = static_cast<char>(c);
        if (!IsBlank(c)) request_id_keep_ = request_id_length_;
      }
      return;

    case kFieldContentLength:
      // 1*DIGIT with optional blanks around it; a list ("5, 5") or anything
      // else cannot be trusted to frame the body.
      if (IsDigit(c) && s.phase <= 1) {
        s.number = s.number * 10 + static_cast<uint64_t>(c - '0');
        if (s.number > kMaxContentLength) return Ignore(sink);
        s.phase = 1;
      } else if (IsBlank(c)) {
        if (s.phase == 1) s.phase = 2;
      } else {
        return Ignore(sink);
      }
      return;

    case kFieldTransferEncoding:
      // Only the last coding matters: is it exactly "chunked"?
      if (c == ',') {
        s.te_match = 0;
        s.te_space = false;
      } else if (IsBlank(c)) {
        if (s.te_match != 0) s.te_space = true;
      } else if (s.te_space || s.te_match < 0 || s.te_match >= kChunkedLength ||
                 Lower(c) != static_cast<unsigned char>(kChunked[s.te_match])) {
        s.te_match = -1;
      } else {
        ++s.te_match;
      }
      return;

    default:
      return;
  }
}

void HttpSniffer::EndValue(Stream& s, HttpEventSink& sink) {
  switch (s.field) {
    case kFieldContentLength:
      if (s.phase == 0) return Ignore(sink);  // empty
      if (s.has_length && s.content_length != s.number) return Ignore(sink);
      s.has_length = true;
      s.content_length = s.number;
      return;
    case kFieldTransferEncoding:
      s.has_te = true;
      s.te_chunked = s.te_match == kChunkedLength;
      return;
    default:
      return;
  }
}

void HttpSniffer::EndOfHead(Stream& s, bool inbound, HttpEventSink& sink) {
  s.head_bytes = 0;
  if (inbound) return EndOfRequestHead(s, sink);
  return EndOfResponseHead(s, sink);
}

void HttpSniffer::EndOfRequestHead(Stream& s, HttpEventSink& sink) {
  // A request body is framed by chunked or Content-Length, or absent. Any
  // other Transfer-Encoding cannot be framed (a server answers 400).
  if (s.has_te && !s.te_chunked) return Ignore(sink);
  if (pending_ >= kMaxPendingRequests) return Ignore(sink);

  const bool is_head = method_length_ == 4 && NameIs(head_.method, 4, "HEAD");
  if (is_head) head_bits_ |= 1u << pending_;
  ++pending_;

  HttpEvent event;
  event.type = HttpEventType::kRequestStarted;
  head_.method[method_length_] = '\0';
  head_.path[path_length_] = '\0';
  head_.request_id[request_id_keep_] = '\0';
  event.head = head_;

  const bool chunked = s.has_te;
  const uint64_t length = s.has_length ? s.content_length : 0;
  s = Stream{};
  if (chunked) {
    s.state = kChunkSize;
  } else if (length > 0) {
    s.remaining = length;
    s.state = kBodyLength;
  }
  Emit(sink, event);
}

void HttpSniffer::EndOfResponseHead(Stream& s, HttpEventSink& sink) {
  const uint16_t status = s.status;
  if (status / 100 == 1) {
    if (status == 101) {  // the connection is no longer HTTP/1.x
      FinishResponse(sink);
      return Ignore(sink);
    }
    s = Stream{};  // 100 Continue, 103 Early Hints: the response follows
    return;
  }
  const bool for_head = pending_ > 0 && (head_bits_ & 1u) != 0;
  if (for_head || status == 204 || status == 304) return FinishResponse(sink);
  if (s.has_te) {
    s.state = s.te_chunked ? kChunkSize : kUntilClose;
    s.index = 0;
    s.remaining = 0;
  } else if (s.has_length) {
    if (s.content_length == 0) return FinishResponse(sink);
    s.remaining = s.content_length;
    s.state = kBodyLength;
  } else {
    s.state = kUntilClose;
  }
}

void HttpSniffer::EndOfBody(Stream& s, bool inbound, HttpEventSink& sink) {
  if (inbound) {
    s = Stream{};
  } else {
    FinishResponse(sink);
  }
}

// The response to the oldest open request is complete. A response nobody
// asked for (a server's early 408 or 400) finishes nothing.
void HttpSniffer::FinishResponse(HttpEventSink& sink) {
  out_ = Stream{};
  if (pending_ == 0) return;
  --pending_;
  head_bits_ >>= 1;
  EmitType(sink, HttpEventType::kResponseFinished);
}

void HttpSniffer::AbortOldest(HttpEventSink& sink) {
  out_ = Stream{};
  if (pending_ == 0) return;
  --pending_;
  head_bits_ >>= 1;
  EmitType(sink, HttpEventType::kRequestAborted);
}

void HttpSniffer::FinishAll(HttpEventSink& sink) {
  while (pending_ > 0) FinishResponse(sink);
}

// Not HTTP/1.x, or past a limit: the requests still open end here (no tag
// stays open forever), then one kConnectionIgnored, then silence.
void HttpSniffer::Ignore(HttpEventSink& sink) {
  if (mode_ != kActive) return;
  FinishAll(sink);
  mode_ = kIgnored;
  EmitType(sink, HttpEventType::kConnectionIgnored);
}

}  // namespace retain::shim
