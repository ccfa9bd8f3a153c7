// control_request: see net/control_request.h.
#include "net/control_request.h"

#include <string.h>

namespace retain::shim {
namespace {

// The first "\r\n" in [begin, end), or nullptr.
const char* FindCrlf(const char* begin, const char* end) {
  for (const char* p = begin; p + 1 < end; ++p) {
    if (p[0] == '\r' && p[1] == '\n') return p;
  }
  return nullptr;
}

// RFC 9110 tchar.
bool IsTokenChar(unsigned char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool NameIs(const char* name, size_t length, const char* lower_literal) {
  size_t literal_length = strlen(lower_literal);
  if (length != literal_length) return false;
  for (size_t i = 0; i < length; ++i) {
    if (Lower(name[i]) != lower_literal[i]) return false;
  }
  return true;
}

// METHOD SP /target SP HTTP/1.x, in [line, line_end).
bool ParseRequestLine(const char* line, const char* line_end, ControlRequest* request) {
  const char* sp1 = static_cast<const char*>(memchr(line, ' ', line_end - line));
  if (sp1 == nullptr || sp1 == line) return false;
  for (const char* p = line; p < sp1; ++p) {
    if (!IsTokenChar(static_cast<unsigned char>(*p))) return false;
  }
  const char* target = sp1 + 1;
  const char* sp2 = static_cast<const char*>(memchr(target, ' ', line_end - target));
  if (sp2 == nullptr || sp2 == target || target[0] != '/') return false;
  for (const char* p = target; p < sp2; ++p) {
    if (static_cast<unsigned char>(*p) <= 0x20 || static_cast<unsigned char>(*p) >= 0x7f) {
      return false;
    }
  }
  const char* version = sp2 + 1;
  if (line_end - version != 8 || memcmp(version, "HTTP/1.", 7) != 0 ||
      (version[7] != '0' && version[7] != '1')) {
    return false;
  }
  const char* question = static_cast<const char*>(memchr(target, '?', sp2 - target));
  request->method = line;
  request->method_length = static_cast<size_t>(sp1 - line);
  request->path = target;
  request->path_length = static_cast<size_t>((question != nullptr ? question : sp2) - target);
  request->query = question != nullptr ? question + 1 : nullptr;
  request->query_length = question != nullptr ? static_cast<size_t>(sp2 - question - 1) : 0;
  return true;
}

// Digits only, at most 18 of them (no overflow); OWS already trimmed.
bool ParseLength(const char* value, size_t length, uint64_t* out) {
  if (length == 0 || length > 18) return false;
  uint64_t n = 0;
  for (size_t i = 0; i < length; ++i) {
    if (value[i] < '0' || value[i] > '9') return false;
    n = n * 10 + static_cast<uint64_t>(value[i] - '0');
  }
  *out = n;
  return true;
}

}  // namespace

size_t ControlHeadLength(const char* data, size_t size) {
  for (size_t i = 0; i + 4 <= size; ++i) {
    if (data[i] == '\r' && memcmp(data + i, "\r\n\r\n", 4) == 0) return i + 4;
  }
  return 0;
}

int ParseControlHead(const char* data, size_t length, ControlRequest* request) {
  *request = ControlRequest{};
  if (length < 4 || memcmp(data + length - 4, "\r\n\r\n", 4) != 0) return 400;
  // No byte of a head is a control character but CR and LF (which only
  // come as CRLF) and HTAB (inside header values).
  for (size_t i = 0; i < length; ++i) {
    auto c = static_cast<unsigned char>(data[i]);
    if (c == '\r') {
      if (i + 1 >= length || data[i + 1] != '\n') return 400;
    } else if (c == '\n') {
      if (i == 0 || data[i - 1] != '\r') return 400;
    } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
      return 400;
    }
  }
  const char* end = data + length;
  const char* line_end = FindCrlf(data, end);
  if (line_end == nullptr || !ParseRequestLine(data, line_end, request)) return 400;
  bool have_length = false;
  bool chunked = false;
  for (const char* line = line_end + 2;;) {
    const char* eol = FindCrlf(line, end);
    if (eol == nullptr) return 400;
    if (eol == line) break;  // the blank line
    const char* colon = static_cast<const char*>(memchr(line, ':', eol - line));
    if (colon == nullptr || colon == line) return 400;
    for (const char* p = line; p < colon; ++p) {
      if (!IsTokenChar(static_cast<unsigned char>(*p))) return 400;
    }
    const char* value = colon + 1;
    const char* value_end = eol;
    while (value < value_end && (*value == ' ' || *value == '\t')) ++value;
    while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t')) --value_end;
    size_t name_length = static_cast<size_t>(colon - line);
    if (NameIs(line, name_length, "content-length")) {
      uint64_t n = 0;
      if (!ParseLength(value, static_cast<size_t>(value_end - value), &n)) return 400;
      if (have_length && n != request->content_length) return 400;
      have_length = true;
      request->content_length = n;
    } else if (NameIs(line, name_length, "transfer-encoding")) {
      chunked = true;
    }
    line = eol + 2;
  }
  if (chunked) return 501;
  if (request->content_length > kControlBodyLimit) return 413;
  return 0;
}

long ControlQueryValue(const char* query, size_t length, const char* name, const char** value) {
  if (query == nullptr) return -1;
  size_t name_length = strlen(name);
  const char* end = query + length;
  for (const char* p = query; p <= end;) {
    const char* amp = static_cast<const char*>(memchr(p, '&', end - p));
    const char* item_end = amp != nullptr ? amp : end;
    if (static_cast<size_t>(item_end - p) >= name_length + 1 && memcmp(p, name, name_length) == 0 &&
        p[name_length] == '=') {
      *value = p + name_length + 1;
      return static_cast<long>(item_end - *value);
    }
    if (amp == nullptr) break;
    p = amp + 1;
  }
  return -1;
}

bool ControlTokenIs(const char* text, size_t length, const char* token) {
  size_t token_length = strlen(token);
  return length == token_length && memcmp(text, token, length) == 0;
}

}  // namespace retain::shim
