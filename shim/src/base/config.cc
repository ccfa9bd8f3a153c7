// config: see base/config.h.
#include "base/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

namespace retain::shim {
namespace {

Config g_config;

bool ParseUnsigned(const char* text, uint64_t* value) {
  if (*text < '0' || *text > '9') return false;
  uint64_t result = 0;
  for (; *text >= '0' && *text <= '9'; ++text) {
    uint64_t digit = static_cast<uint64_t>(*text - '0');
    if (result > (UINT64_MAX - digit) / 10) return false;
    result = result * 10 + digit;
  }
  if (*text != '\0') return false;
  *value = result;
  return true;
}

// `path` made absolute against the working directory, into `out`. False
// when it does not fit or the working directory cannot be read.
bool MakeAbsolute(const char* path, char* out, size_t size) {
  if (path[0] == '/') return snprintf(out, size, "%s", path) < static_cast<int>(size);
  char cwd[1024];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return false;
  const char* rest = path;
  while (rest[0] == '.' && rest[1] == '/') rest += 2;
  if (strcmp(rest, ".") == 0) rest = "";
  const char* separator = rest[0] == '\0' || strcmp(cwd, "/") == 0 ? "" : "/";
  return snprintf(out, size, "%s%s%s", cwd, separator, rest) < static_cast<int>(size);
}

void LoadDir(Config* config) {
  const char* dir = getenv("RETAIN_DIR");
  if (dir == nullptr || *dir == '\0') dir = ".";
  // Room for "/.<name>.<pid>.<sequence>.pb.tmp".
  const size_t limit = sizeof(config->dir) - 64;
  if (strlen(dir) >= limit || !MakeAbsolute(dir, config->dir, limit)) {
    LogConfigError(
        "RETAIN_DIR is longer than %zu bytes or the working directory is unknown;"
        " using '/tmp'",
        limit);
    strcpy(config->dir, "/tmp");
    return;
  }
  struct stat st;
  if (stat(config->dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      LogConfigError("RETAIN_DIR '%s' is not a directory; no snapshot can be written", config->dir);
    }
  } else if (errno != ENOENT) {
    LogConfigError("RETAIN_DIR '%s': %s", config->dir, strerror(errno));
  }
}

// An on/off switch that is on unless set to off (or 0); anything else but
// on (or 1) gets a configuration error and stays on.
bool ReadOnOff(const char* name) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return true;
  if (strcasecmp(text, "off") == 0 || strcmp(text, "0") == 0) return false;
  if (strcasecmp(text, "on") != 0 && strcmp(text, "1") != 0) {
    LogConfigError("%s='%.64s' is not on or off; using on", name, text);
  }
  return true;
}

// A numeric loopback host ("127.0.0.1", "::1" or "[::1]") into `out`
// (address only). False, with `why` set, for anything else.
bool ParseLoopbackHost(char* name, LoopbackPort* out, const char** why) {
  size_t length = strlen(name);
  char* start = name;
  if (length >= 2 && name[0] == '[' && name[length - 1] == ']') {
    name[length - 1] = '\0';
    start = name + 1;
  }
  *out = LoopbackPort{};
  struct in_addr v4;
  struct in6_addr v6;
  if (inet_pton(AF_INET, start, &v4) == 1) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&v4.s_addr);
    if (bytes[0] != 127) {
      *why = "is not a loopback address (127.0.0.0/8 or ::1): refused";
      return false;
    }
    memcpy(out->addr, bytes, 4);
    return true;
  }
  if (inet_pton(AF_INET6, start, &v6) == 1) {
    if (memcmp(&v6, &in6addr_loopback, sizeof(v6)) != 0) {
      *why = "is not a loopback address (127.0.0.0/8 or ::1): refused";
      return false;
    }
    memcpy(out->addr, &v6, 16);
    out->ipv6 = true;
    return true;
  }
  return false;
}

}  // namespace

bool ParseDuration(const char* text, uint64_t* milliseconds) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  uint64_t number = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (number > (UINT64_MAX - digit) / 10) return false;
    number = number * 10 + digit;
  }
  uint64_t scale;
  if (strcmp(p, "ms") == 0) {
    scale = 1;
  } else if (*p == '\0' || strcmp(p, "s") == 0) {
    scale = 1000;
  } else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0) {
    scale = 60 * 1000;
  } else if (strcmp(p, "h") == 0) {
    scale = 3600 * 1000;
  } else {
    return false;
  }
  if (number == 0 || number > UINT64_MAX / scale) return false;
  *milliseconds = number * scale;
  return true;
}

bool ParseByteSize(const char* text, uint64_t* bytes) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  uint64_t number = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (number > (UINT64_MAX - digit) / 10) return false;
    number = number * 10 + digit;
  }
  int shift = 0;
  switch (*p) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++p;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++p;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++p;
      break;
    case 't':
    case 'T':
      shift = 40;
      ++p;
      break;
    case 'b':
    case 'B':
      break;
    default:
      return false;
  }
  // Accept an optional "i" then an optional "B" after the unit.
  if (shift != 0 && (*p == 'i' || *p == 'I')) ++p;
  if (*p == 'b' || *p == 'B') ++p;
  if (*p != '\0') return false;
  if (shift != 0 && number > (UINT64_MAX >> shift)) return false;
  *bytes = number << shift;
  return true;
}

bool ParseSignal(const char* text, int* signal_number) {
  if (text == nullptr) return false;
  if (strcasecmp(text, "none") == 0 || strcmp(text, "0") == 0) {
    *signal_number = 0;
    return true;
  }
  if (strncasecmp(text, "SIG", 3) == 0) text += 3;
  static const struct {
    const char* name;
    int number;
  } kNames[] = {{"USR1", SIGUSR1},   {"USR2", SIGUSR2}, {"HUP", SIGHUP},
                {"WINCH", SIGWINCH}, {"URG", SIGURG},   {"PWR", SIGPWR}};
  for (const auto& entry : kNames) {
    if (strcasecmp(text, entry.name) == 0) {
      *signal_number = entry.number;
      return true;
    }
  }
  uint64_t number = 0;
  if (!ParseUnsigned(text, &number) || number < 1 || number > static_cast<uint64_t>(SIGRTMAX)) {
    return false;
  }
  switch (number) {
    // Signals that mean a crash or cannot be caught are not ours to take.
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGABRT:
    case SIGTRAP:
    case SIGSYS:
      return false;
    default:
      *signal_number = static_cast<int>(number);
      return true;
  }
}

bool ParseControl(const char* text, Config* config, const char** why) {
  config->control = ControlKind::kOff;
  *why = "is not unix:PATH or tcp:127.0.0.1:PORT";
  if (text == nullptr) return false;
  if (strncmp(text, "unix:", 5) == 0) {
    const char* path = text + 5;
    size_t length = strlen(path);
    if (length == 0 || length >= sizeof(config->control_path)) {
      *why = "names no socket path or one longer than 107 bytes";
      return false;
    }
    memcpy(config->control_path, path, length + 1);
    config->control = ControlKind::kUnix;
    return true;
  }
  if (strncmp(text, "tcp:", 4) != 0) return false;
  const char* host = text + 4;
  const char* colon = strrchr(host, ':');
  if (colon == nullptr || colon == host) return false;
  uint64_t port = 0;
  if (!ParseUnsigned(colon + 1, &port) || port == 0 || port > 65535) return false;
  char name[64];
  size_t length = static_cast<size_t>(colon - host);
  if (length >= sizeof(name)) return false;
  memcpy(name, host, length);
  name[length] = '\0';
  LoopbackPort address;
  if (!ParseLoopbackHost(name, &address, why)) return false;
  memcpy(config->control_addr, address.addr, sizeof(config->control_addr));
  config->control_ipv6 = address.ipv6;
  config->control_port = static_cast<uint16_t>(port);
  config->control = ControlKind::kTcp;
  return true;
}

bool ParseFrontDoor(const char* text, Config* config, const char** why) {
  config->front_door = false;
  *why = "is not LISTEN_PORT:TARGET_PORT (each side PORT, 127.0.0.1:PORT or [::1]:PORT)";
  if (text == nullptr) return false;
  // Tokens split at ':' outside brackets: [HOST] PORT [HOST] PORT, where a
  // HOST is bracketed or dotted.
  char copy[160];
  size_t length = strlen(text);
  if (length == 0 || length >= sizeof(copy)) return false;
  memcpy(copy, text, length + 1);
  char* tokens[4];
  int count = 0;
  bool in_brackets = false;
  char* token = copy;
  for (char* p = copy;; ++p) {
    if (*p == '[') in_brackets = true;
    if (*p == ']') in_brackets = false;
    if ((*p == ':' && !in_brackets) || *p == '\0') {
      if (count == 4) return false;
      const bool end = *p == '\0';
      *p = '\0';
      tokens[count++] = token;
      token = p + 1;
      if (end) break;
    }
  }
  LoopbackPort sides[2];
  int next = 0;
  for (LoopbackPort& side : sides) {
    if (next >= count) return false;
    side = LoopbackPort{};
    side.addr[0] = 127;
    side.addr[3] = 1;
    char* first = tokens[next];
    if (first[0] == '[' || strchr(first, '.') != nullptr) {
      if (!ParseLoopbackHost(first, &side, why)) return false;
      ++next;
      if (next >= count) return false;
    }
    uint64_t port = 0;
    if (!ParseUnsigned(tokens[next++], &port) || port == 0 || port > 65535) return false;
    side.port = static_cast<uint16_t>(port);
  }
  if (next != count) return false;
  if (sides[0].ipv6 == sides[1].ipv6 && sides[0].port == sides[1].port &&
      memcmp(sides[0].addr, sides[1].addr, sizeof(sides[0].addr)) == 0) {
    *why = "listens where it relays to: refused";
    return false;
  }
  config->front_door_listen = sides[0];
  config->front_door_target = sides[1];
  config->front_door = true;
  return true;
}

void LoadConfig(Config* config) {
  *config = Config{};
  const char* log = getenv("RETAIN_LOG");
  if (log != nullptr && *log != '\0') {
    if (strcmp(log, "1") == 0 || strcasecmp(log, "on") == 0 || strcasecmp(log, "true") == 0 ||
        strcasecmp(log, "yes") == 0) {
      config->log = true;
    } else if (strcmp(log, "0") == 0 || strcasecmp(log, "off") == 0 ||
               strcasecmp(log, "false") == 0 || strcasecmp(log, "no") == 0) {
      config->log = false;
    } else if (strchr(log, '/') != nullptr &&
               MakeAbsolute(log, config->log_path, sizeof(config->log_path))) {
      config->log = true;
    } else {
      LogConfigError("RETAIN_LOG='%.64s' is not 0, 1 or a path; using 0", log);
    }
  }
  SetLogDestination(config->log, config->log_path[0] != '\0' ? config->log_path : nullptr);

  LoadDir(config);

  config->snapshot_signal = SIGUSR2;
  if (const char* text = getenv("RETAIN_SIGNAL"); text != nullptr && *text != '\0') {
    if (!ParseSignal(text, &config->snapshot_signal)) {
      LogConfigError(
          "RETAIN_SIGNAL='%.64s' is not none, USR1, USR2, HUP or a catchable signal number;"
          " using USR2",
          text);
      config->snapshot_signal = SIGUSR2;
    }
  }

  config->unwind = UnwindMode::kCfi;
  if (const char* text = getenv("RETAIN_UNWIND"); text != nullptr && *text != '\0') {
    if (strcasecmp(text, "fp") == 0 || strcasecmp(text, "frame-pointer") == 0) {
      config->unwind = UnwindMode::kFramePointer;
    } else if (strcasecmp(text, "libunwind") == 0) {
      config->unwind = UnwindMode::kLibunwind;
    } else if (strcasecmp(text, "cfi") != 0) {
      LogConfigError("RETAIN_UNWIND='%.64s' is not cfi, libunwind or fp; using cfi", text);
    }
  }

  config->depth = kDefaultDepth;
  if (const char* text = getenv("RETAIN_DEPTH"); text != nullptr && *text != '\0') {
    uint64_t depth = 0;
    if (!ParseUnsigned(text, &depth) || depth < 1 || depth > kMaxDepth) {
      LogConfigError("RETAIN_DEPTH='%.64s' is not a number in 1..%d; using %d", text, kMaxDepth,
                     kDefaultDepth);
    } else {
      config->depth = static_cast<int>(depth);
    }
  }

  config->http = ReadOnOff("RETAIN_HTTP");
  config->vulkan = ReadOnOff("RETAIN_VULKAN");
  config->go_signals = ReadOnOff("RETAIN_GO_SIGNALS");
  config->http_paths[0] = '\0';
  if (const char* text = getenv("RETAIN_HTTP_PATHS"); text != nullptr) {
    const size_t length = strlen(text);
    if (length >= sizeof(config->http_paths)) {
      LogConfigError("RETAIN_HTTP_PATHS is longer than %zu bytes; every path opens a tag",
                     sizeof(config->http_paths) - 1);
    } else {
      memcpy(config->http_paths, text, length + 1);
    }
  }

  config->snapshot_every = 0;
  if (const char* text = getenv("RETAIN_SNAPSHOT_EVERY"); text != nullptr && *text != '\0') {
    uint64_t every = 0;
    if (!ParseUnsigned(text, &every)) {
      LogConfigError("RETAIN_SNAPSHOT_EVERY='%.64s' is not a number of requests; using 0 (off)",
                     text);
    } else {
      config->snapshot_every = every;
    }
  }

  config->snapshot_interval_ms = 0;
  if (const char* text = getenv("RETAIN_SNAPSHOT_INTERVAL");
      text != nullptr && *text != '\0' && strcmp(text, "off") != 0 && strcmp(text, "0") != 0) {
    uint64_t ms = 0;
    if (!ParseDuration(text, &ms)) {
      LogConfigError(
          "RETAIN_SNAPSHOT_INTERVAL='%.64s' is not a duration (e.g. 30s, 500ms, 5m); using off",
          text);
    } else if (ms < kMinSnapshotIntervalMs) {
      LogConfigError("RETAIN_SNAPSHOT_INTERVAL='%.64s' is below 100ms; using 100ms", text);
      config->snapshot_interval_ms = kMinSnapshotIntervalMs;
    } else {
      config->snapshot_interval_ms = ms;
    }
  }
  config->keep_count = 0;
  if (const char* text = getenv("RETAIN_KEEP"); text != nullptr && *text != '\0') {
    uint64_t keep = 0;
    if (!ParseUnsigned(text, &keep)) {
      LogConfigError("RETAIN_KEEP='%.64s' is not a number of snapshots; keeping all", text);
    } else if (keep > kMaxKeep) {
      LogConfigError("RETAIN_KEEP='%.64s' is above %llu; using %llu", text,
                     static_cast<unsigned long long>(kMaxKeep),
                     static_cast<unsigned long long>(kMaxKeep));
      config->keep_count = kMaxKeep;
    } else {
      config->keep_count = keep;
    }
  }
  config->keep_bytes = 0;
  if (const char* text = getenv("RETAIN_KEEP_BYTES"); text != nullptr && *text != '\0') {
    uint64_t bytes = 0;
    if (!ParseByteSize(text, &bytes)) {
      LogConfigError("RETAIN_KEEP_BYTES='%.64s' is not a size (e.g. 1GiB); no byte budget", text);
    } else {
      config->keep_bytes = bytes;
    }
  }

  config->min_free = kAutoMinFree;
  if (const char* text = getenv("RETAIN_MIN_FREE");
      text != nullptr && *text != '\0' && strcmp(text, "auto") != 0) {
    uint64_t bytes = 0;
    if (!ParseByteSize(text, &bytes)) {
      LogConfigError("RETAIN_MIN_FREE='%.64s' is not a size (e.g. 2GiB, or 0); using auto", text);
    } else {
      config->min_free = bytes;
    }
  }
  config->child_exit_min_ms = kDefaultChildExitMinMs;
  if (const char* text = getenv("RETAIN_CHILD_EXIT_MIN"); text != nullptr && *text != '\0') {
    uint64_t ms = 0;
    if (strcmp(text, "0") == 0) {
      config->child_exit_min_ms = 0;
    } else if (!ParseDuration(text, &ms)) {
      LogConfigError("RETAIN_CHILD_EXIT_MIN='%.64s' is not a duration (e.g. 5s, 0); using 5s",
                     text);
    } else {
      config->child_exit_min_ms = ms;
    }
  }

  config->sample_interval = 0;
  if (const char* text = getenv("RETAIN_SAMPLE");
      text != nullptr && *text != '\0' && strcmp(text, "off") != 0) {
    uint64_t bytes = 0;
    if (!ParseByteSize(text, &bytes)) {
      LogConfigError("RETAIN_SAMPLE='%.64s' is not a byte size (e.g. 512KiB); recording everything",
                     text);
    } else {
      config->sample_interval = bytes;
    }
  }
  config->sample_seed = 0;
  if (const char* text = getenv("RETAIN_SAMPLE_SEED"); text != nullptr && *text != '\0') {
    if (!ParseUnsigned(text, &config->sample_seed)) {
      LogConfigError("RETAIN_SAMPLE_SEED='%.64s' is not a number; seeding from the clock", text);
      config->sample_seed = 0;
    }
  }

  config->control = ControlKind::kOff;
  if (const char* text = getenv("RETAIN_CONTROL"); text != nullptr && *text != '\0') {
    const char* why = nullptr;
    if (!ParseControl(text, config, &why)) {
      LogConfigError("RETAIN_CONTROL='%.128s' %s; no control endpoint", text, why);
    }
  }

  if (const char* text = getenv("RETAIN_FRONT_DOOR"); text != nullptr && *text != '\0') {
    const char* why = nullptr;
    if (!ParseFrontDoor(text, config, &why)) {
      LogConfigError("RETAIN_FRONT_DOOR='%.128s' %s; no front door", text, why);
    }
  }

  config->control_rate = kDefaultControlRate;
  if (const char* text = getenv("RETAIN_CONTROL_RATE"); text != nullptr && *text != '\0') {
    uint64_t rate = 0;
    if (!ParseUnsigned(text, &rate) || rate < 1 || rate > kMaxControlRate) {
      LogConfigError("RETAIN_CONTROL_RATE='%.64s' is not a number in 1..%d; using %d", text,
                     kMaxControlRate, kDefaultControlRate);
    } else {
      config->control_rate = static_cast<int>(rate);
    }
  }

  config->max_memory = kDefaultMaxMemory;
  if (const char* text = getenv("RETAIN_MAX_MEMORY"); text != nullptr && *text != '\0') {
    uint64_t bytes = 0;
    if (!ParseByteSize(text, &bytes)) {
      LogConfigError("RETAIN_MAX_MEMORY='%.64s' is not a size (or 0 for no cap); using 2GiB", text);
    } else if (bytes != 0 && bytes < kMinMaxMemory) {
      // The shim's fixed tables (stack cache, CFI rules, sampling filter,
      // first arena chunk) take about 2 MiB before the first record.
      LogConfigError(
          "RETAIN_MAX_MEMORY='%.64s' is below the smallest cap that records anything;"
          " using 8MiB",
          text);
      config->max_memory = kMinMaxMemory;
    } else {
      config->max_memory = bytes;
    }
  }
}

const Config& GetConfig() { return g_config; }
Config* MutableConfig() { return &g_config; }

}  // namespace retain::shim
