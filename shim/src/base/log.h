// log: the shim's voice, one line at a time, each starting with "retain: ".
//
// The host's stderr is the host's: the shim writes to it only for
// configuration errors found at start-up, once per process tree. Everything
// else (problems at run time, diagnostics) goes to RETAIN_LOG when it is set
// (1: stderr, or a file, appended to) and is otherwise silent; what matters
// later is also counted in the snapshot's health block.
//
// A fixed-size stack buffer and write(2): safe inside hooks, never
// allocates, preserves errno. Not async-signal-safe when RETAIN_LOG names a
// file (own_fds' lock).
#ifndef RETAIN_SHIM_SRC_BASE_LOG_H_
#define RETAIN_SHIM_SRC_BASE_LOG_H_

namespace retain::shim {

// From configuration parsing at start-up: on stderr unless a process up the
// tree already reported its configuration (the environment variable
// RETAIN_CONFIG_REPORTED, set by the first one, is inherited), and in the
// RETAIN_LOG file.
void LogConfigError(const char* format, ...) __attribute__((format(printf, 1, 2)));
// A problem at run time (a snapshot that could not be written, a table
// full), and diagnostics: RETAIN_LOG only.
void LogWarning(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogDiagnostic(const char* format, ...) __attribute__((format(printf, 1, 2)));

// RETAIN_LOG: off; on stderr (path nullptr); or appended to the file `path`
// (absolute; the file is opened for each line and closed again).
void SetLogDestination(bool enabled, const char* path);

// After the configuration was read: marks the process tree as told (sets
// RETAIN_CONFIG_REPORTED) when this process printed a configuration error.
void FinishConfigReport();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_LOG_H_
