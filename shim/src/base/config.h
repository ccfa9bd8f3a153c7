// config: the shim's settings, read once from the environment.
//
// Parsing never allocates (getenv and fixed buffers) and never fails: a bad
// value gets one warning line and the default. Read-only after
// LoadConfig(); safe to read from any thread and from hooks.
#ifndef RETAIN_SHIM_SRC_BASE_CONFIG_H_
#define RETAIN_SHIM_SRC_BASE_CONFIG_H_

#include <cstdint>

namespace retain::shim {

enum class UnwindMode { kCfi, kLibunwind, kFramePointer };
enum class ControlKind { kOff, kUnix, kTcp };

// A loopback TCP address: 127.0.0.0/8 or ::1, and a port.
struct LoopbackPort {
  bool ipv6;
  unsigned char addr[16];  // network order (4 bytes for IPv4)
  uint16_t port;           // host order
};

struct Config {
  // RETAIN_DIR: where snapshots go, made absolute at start (a relative one
  // is relative to the working directory the program started in). Default:
  // that working directory.
  char dir[1024];
  // RETAIN_SIGNAL: signal number that asks for a snapshot; 0 = none.
  int snapshot_signal;
  // RETAIN_UNWIND: cfi (default), libunwind or fp (unwind/stack_capture.h).
  UnwindMode unwind;
  // RETAIN_DEPTH: frames kept per stack, 1..kMaxDepth. Default 48.
  int depth;
  // RETAIN_MAX_MEMORY: cap on the shim's own memory, bytes; 0 = no cap.
  uint64_t max_memory;
  // RETAIN_LOG: the shim's diagnostics and run-time problems: off (0, the
  // default), on stderr (1), or appended to a file (a path, made absolute).
  bool log;
  char log_path[1024];  // empty: stderr
  // RETAIN_HTTP: follow HTTP/1.x on accepted sockets to tag requests.
  bool http;
  // RETAIN_HTTP_PATHS: comma-separated paths that open tags; "" = all.
  char http_paths[1024];
  // RETAIN_VULKAN: the Vulkan layer (gpu/vulkan_manifest.h); on by default.
  bool vulkan;
  // RETAIN_GO_SIGNALS: in a Go program, chain the snapshot signal and the
  // stop signals with the Go runtime's handlers (snapshot/signal_chain.h);
  // on by default.
  bool go_signals;
  // RETAIN_SNAPSHOT_EVERY: a snapshot after every Nth request ends; 0 = off.
  uint64_t snapshot_every;
  // RETAIN_SNAPSHOT_INTERVAL: a snapshot every this many milliseconds,
  // written by the service thread (continuous mode); 0 = off.
  uint64_t snapshot_interval_ms;
  // RETAIN_KEEP / RETAIN_KEEP_BYTES: keep at most this many of the
  // snapshots this process wrote, and at most this many bytes of them
  // (the newest always stays); older ones are deleted (snapshot/retention.h).
  // 0 = no limit.
  uint64_t keep_count;
  uint64_t keep_bytes;
  // RETAIN_MIN_FREE: bytes a snapshot must leave free on RETAIN_DIR's
  // filesystem (snapshot/disk_reserve.h); kAutoMinFree: 5 % of it, within
  // [64 MiB, 1 GiB]; 0 = no reserve.
  uint64_t min_free;
  // RETAIN_CHILD_EXIT_MIN: a fork child (one that did not exec) writes its
  // exit snapshot only when it lived at least this many milliseconds since
  // the fork; 0 = always.
  uint64_t child_exit_min_ms;
  // RETAIN_SAMPLE: mean bytes between sampled heap allocations (record/sampler.h);
  // 0 (default, or "off") records every allocation. RETAIN_SAMPLE_SEED: a
  // fixed seed for reproducible sampling; 0 = from the clock.
  uint64_t sample_interval;
  uint64_t sample_seed;
  // RETAIN_CONTROL: the control endpoint (net/control_server.h); off by default.
  // "unix:PATH" or "tcp:HOST:PORT" with HOST a loopback address
  // (127.0.0.0/8, ::1 or [::1]); anything else is refused with a warning.
  ControlKind control;
  char control_path[108];          // kUnix: the socket path
  bool control_ipv6;               // kTcp: which of the two below
  unsigned char control_addr[16];  // kTcp: network order (4 bytes for IPv4)
  uint16_t control_port;           // kTcp: host order
  // RETAIN_CONTROL_RATE: snapshots the endpoint writes in any one second
  // (POST and GET /snapshot together; beyond, 429). 1..kMaxControlRate.
  int control_rate;
  // RETAIN_FRONT_DOOR: the front door (net/front_door.h), a loopback port of
  // the shim's relaying to the server's port; off by default.
  // "LISTEN:TARGET", each side a PORT (on 127.0.0.1) or HOST:PORT with HOST
  // a loopback address (127.0.0.0/8 or [::1]); anything else is refused.
  bool front_door;
  LoopbackPort front_door_listen;
  LoopbackPort front_door_target;
};

inline constexpr int kMaxDepth = 256;
inline constexpr int kDefaultDepth = 48;
inline constexpr uint64_t kDefaultMaxMemory = uint64_t{2} << 30;
// The smallest RETAIN_MAX_MEMORY accepted (smaller values are raised to it).
inline constexpr uint64_t kMinMaxMemory = uint64_t{8} << 20;
inline constexpr int kDefaultControlRate = 5;
// RETAIN_SNAPSHOT_INTERVAL below this is raised to it: a snapshot costs
// about 0.2 s per million live allocations.
inline constexpr uint64_t kMinSnapshotIntervalMs = 100;
// RETAIN_KEEP above this is lowered to it (the retention ring's size).
inline constexpr uint64_t kMaxKeep = 4096;
// RETAIN_MIN_FREE's default (snapshot/disk_reserve.h: 5 % of the
// filesystem, at least 64 MiB and at most 1 GiB).
inline constexpr uint64_t kAutoMinFree = ~uint64_t{0};
// RETAIN_CHILD_EXIT_MIN's default: a fork child's exit snapshot only after
// 5 s of its own (a shell's subshells, a connection-per-request server's
// workers live milliseconds, and each would write the parent's whole heap).
inline constexpr uint64_t kDefaultChildExitMinMs = 5000;
inline constexpr int kMaxControlRate = 100;

// Fills `config` from the environment, warning about bad values.
void LoadConfig(Config* config);

// Parses "4096", "64K", "64KiB", "64MiB", "1G", "2GB"... (binary units).
// Returns false on anything else. Exposed for tests.
bool ParseByteSize(const char* text, uint64_t* bytes);
// Parses a duration: a number and a unit, "500ms", "30s", "5m", "2h"
// (a bare number is seconds), into milliseconds. Returns false on anything
// else, on 0 and on an overflow. Exposed for tests.
bool ParseDuration(const char* text, uint64_t* milliseconds);
// Parses "none", "USR1", "SIGUSR2", "HUP", "12"... Returns false on anything
// else or a signal the shim must not take (KILL, STOP, SEGV, ...).
bool ParseSignal(const char* text, int* signal_number);

// Parses a RETAIN_CONTROL value into config->control*. Returns false (and
// leaves control off) on a malformed value or a TCP host that is not
// loopback; `why` then says which. Exposed for tests.
bool ParseControl(const char* text, Config* config, const char** why);

// Parses a RETAIN_FRONT_DOOR value into config->front_door*. Returns false
// (and leaves the front door off) on a malformed value, a host that is not
// loopback, a port 0 or a listening address equal to the target; `why` then
// says which. Exposed for tests.
bool ParseFrontDoor(const char* text, Config* config, const char** why);

// The configuration in force (valid after the shim initialised).
const Config& GetConfig();
Config* MutableConfig();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_CONFIG_H_
